"""What the sequence placers (the RNN placer and the hierarchical planner) share: op embeddings, seq2seq, REINFORCE and their run directories."""
