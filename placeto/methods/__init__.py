"""Learned placement methods beside Placeto, one subpackage each (config, network, update rule, placing).

    gdp/            GDP: GNN + segment-recurrent attention, PPO, trained on families
    rnn/            the 2017 RNN placer (seeds 000/002), trained per graph
    hierarchical/   the 2018 hierarchical planner (seed 001), trained per graph

What rnn and hierarchical share, one module per concept: op_embed (op embeddings and their inputs), seq2seq (the
LSTM encoder + attentional decoder), reinforce (REINFORCE with a moving-average baseline), pergraph (config base
and method registry), rundir (run directory: training, checkpoints, resume), pergraph_place (placing from a run,
training inside a budget: the compare rows), pergraph_cli (`placeto train --method rnn|hierarchical`).
"""
