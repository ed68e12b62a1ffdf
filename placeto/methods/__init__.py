"""The learned placement methods: one subpackage each, behind one interface.

    placeto/        Placeto: GNN policy over an MDP placing one node per step, REINFORCE on families
    gdp/            GDP: GNN + segment-recurrent attention, PPO, trained on families
    rnn/            the 2017 RNN placer (seeds 000/002), trained per graph
    hierarchical/   the 2018 hierarchical planner (seed 001), trained per graph

Each package exports `METHOD`, a `base.Method` (name, config class, presets, compare rows, train, run, load, ...);
`registry` lists them by name and loads one when asked: search, compare, the shipped policies and the CLI reach
every learned method through it, never a method module by name.

Code map, from the bottom up (every import points down; tests/test_import_cycles.py checks there is no circle
and that no method imports another):
    simulator/                  the world: graphs, clusters, simulation
    shared by all methods       placeto.features, placeto.gnn, placeto.config_fields, placeto.checkpoint_io,
                                placeto.objective, placeto.rollouts, placeto.policies (docs/packages.md)
    shared by rnn, hierarchical sequence/: op_embed (op embeddings and their inputs), seq2seq (the LSTM encoder and
                                attentional decoder), reinforce (REINFORCE with a moving-average baseline),
                                pergraph (config base, MethodSpec), specs (each one's MethodSpec by name), rundir
                                (training, checkpoints, resume), place (placing from a run, training inside a
                                budget: the compare rows), cli (`placeto train --method rnn|hierarchical`),
                                method (the Method both build)
    shared by the searches      prior (annealing steered by a policy's prior: placeto-search and gdp-search)
    the methods                 placeto/ (with guided: its policy-guided search), gdp/, rnn/, hierarchical/
    above the methods           registry, placeto.harness, placeto.cli
"""
