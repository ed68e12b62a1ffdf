"""The `Method` of a per-graph placer (rnn, hierarchical): the same train / run / load over the shared per-graph code
(pergraph_cli, pergraph_place, rundir), differing only in name, description and config class."""

from __future__ import annotations

from typing import Any

from placeto.methods.base import Method


def pergraph_method(config_cls: type, presets: dict[str, Any], description: str) -> Method:
    """The Method of per-graph placer `config_cls.METHOD` (its compare row has the same name)."""
    name = config_cls.METHOD

    def train(args, graphs, clusters, workers=None) -> int:
        from placeto.methods.sequence.cli import train_from_args

        return train_from_args(name, args, graphs, clusters, workers=workers)

    def run(variant, graph, cluster, seed=0, budget=None, seconds=None, checkpoint=None, finetune_episodes=0):
        from placeto.methods.sequence.place import run_pergraph

        del finetune_episodes  # per graph: trained longer instead (finetunes=False)
        return run_pergraph(variant, graph, cluster, seed, budget, seconds, checkpoint)

    def load(run_dir):
        from placeto.methods.sequence.rundir import load_run

        config, params, _ = load_run(run_dir)
        return config, params

    return Method(name=name, description=description, config_cls=config_cls, presets=presets, variants=(name,),
                  train=train, run=run, load=load, per_graph=True)
