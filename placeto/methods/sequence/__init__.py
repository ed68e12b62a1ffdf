"""What the sequence placers (rnn, hierarchical) share.

Op embeddings, seq2seq, REINFORCE and their run directories.
"""
