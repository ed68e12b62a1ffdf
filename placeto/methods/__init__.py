"""The learned placement methods, one subpackage each, side by side behind one interface.

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
    shared by all methods       placeto.features (graph features, padding buckets), placeto.gnn (message
                                passing, position encoding), placeto.config_fields (typed, range-checked
                                configs; --set), placeto.checkpoint_io (run directory files), placeto.objective
                                (the objective and the simulator-call meter), placeto.rollouts.workers (rollout workers,
                                in-process pool), placeto.rollouts.distributed (Ray), placeto.policies (shipped checkpoints)
    shared by rnn, hierarchical op_embed (op embeddings and their inputs), seq2seq (the LSTM encoder + attentional
                                decoder), reinforce (REINFORCE with a moving-average baseline), pergraph (config
                                base, MethodSpec), pergraph_specs (each one's MethodSpec by name), rundir (run
                                directory: training, checkpoints, resume), pergraph_place (placing from a run,
                                training inside a budget: the compare rows), pergraph_cli (`placeto train --method
                                rnn|hierarchical`)
    the methods                 placeto/, gdp/, rnn/, hierarchical/
    above the methods           registry; placeto.search (annealing; search.prior: annealing steered by a policy's
                                prior, shared by placeto-search and gdp-search; search.guided: Placeto's
                                policy-guided search), placeto.harness.compare, placeto.cli.main / cli_placers
"""
