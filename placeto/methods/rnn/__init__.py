"""The RNN placer (Mirhoseini et al., ICML 2017; seeds 000 and 002), trained per graph with REINFORCE.

    config.py   RnnConfig (frozen, `tiny` preset)
    model.py    op embeddings -> bidirectional LSTM encoder -> attentional LSTM decoder, a device per item

Shared with the hierarchical planner: op embeddings (placeto.methods.op_embed), the seq2seq placer
(placeto.methods.seq2seq), REINFORCE (placeto.methods.reinforce), the run directory (placeto.methods.rundir),
placing and the compare row (placeto.methods.pergraph_place).
The MethodSpec (config, presets, inputs, network) the shared per-graph code looks up is spec.py's.
"""

from __future__ import annotations

from placeto.methods.base import Method
from placeto.methods.rnn.config import PRESETS, RnnConfig


def _train(args, graphs, clusters, workers=None) -> int:
    from placeto.methods.pergraph_cli import train_from_args

    return train_from_args(RnnConfig.METHOD, args, graphs, clusters, workers=workers)


def _run(variant, graph, cluster, seed=0, budget=None, seconds=None, checkpoint=None, finetune_episodes=0):
    from placeto.methods.pergraph_place import run_pergraph

    del finetune_episodes  # per graph: trained longer instead (finetunes=False)
    return run_pergraph(variant, graph, cluster, seed, budget, seconds, checkpoint)


def _load(run_dir):
    from placeto.methods.rundir import load_run

    config, params, _ = load_run(run_dir)
    return config, params


METHOD = Method(
    name=RnnConfig.METHOD, description="RNN placer (2017): op embeddings, seq2seq LSTM with attention, REINFORCE per graph",
    config_cls=RnnConfig, presets=PRESETS, variants=(RnnConfig.METHOD,), train=_train, run=_run,
    load=_load, per_graph=True)
