"""The hierarchical planner (Mirhoseini et al., ICLR 2018; seed 001), trained per graph with REINFORCE.

    config.py   HierarchicalConfig (frozen, `tiny` preset)
    model.py    feed-forward Grouper (a softmax over G groups per op) + seq2seq Placer over group embeddings

It reads raw op graphs (no colocation items, no prior grouping): inputs are placeto.methods.op_embed's with one
item per op, which the model ignores, and positions in the depth-first order (the block prior's blocks). Shared
with rnn: op embeddings, the seq2seq placer, REINFORCE, the run directory, placing and the compare row (see
placeto.methods.rnn).
The MethodSpec (config, presets, inputs, network) the shared per-graph code looks up is spec.py's.
"""

from __future__ import annotations

from placeto.methods.base import Method
from placeto.methods.hierarchical.config import PRESETS, HierarchicalConfig


def _train(args, graphs, clusters, workers=None) -> int:
    from placeto.methods.pergraph_cli import train_from_args

    return train_from_args(HierarchicalConfig.METHOD, args, graphs, clusters, workers=workers)


def _run(variant, graph, cluster, seed=0, budget=None, seconds=None, checkpoint=None, finetune_episodes=0):
    from placeto.methods.pergraph_place import run_pergraph

    del finetune_episodes  # per graph: trained longer instead (finetunes=False)
    return run_pergraph(variant, graph, cluster, seed, budget, seconds, checkpoint)


def _load(run_dir):
    from placeto.methods.rundir import load_run

    config, params, _ = load_run(run_dir)
    return config, params


METHOD = Method(
    name=HierarchicalConfig.METHOD, description="hierarchical planner (2018): Grouper + seq2seq Placer, REINFORCE per graph",
    config_cls=HierarchicalConfig, presets=PRESETS, variants=(HierarchicalConfig.METHOD,), train=_train, run=_run,
    load=_load, per_graph=True)
