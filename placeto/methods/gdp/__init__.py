"""GDP (seed 003, SGDP): a single-shot placer. GraphSAGE node embeddings, a segment-recurrent attention over
the nodes in topological order, a device-count agnostic scoring head; trained with PPO on whole placements.
Its placement is read off the network's one forward pass either node by node independently (the paper's
decoder) or by a list decoder that takes the nodes in a list scheduler's order and conditions each decision on
the devices already chosen (config.decoder; the shipped large-graph policy gdp-large, the default above
base.LARGE_GRAPH_NODES nodes).

    config.py   GdpConfig (frozen, `tiny` preset)
    inputs.py   graph + cluster -> padded GdpInputs (no N x N array anywhere)
    model.py    the flax network: GdpInputs -> logits float32[Np, Dm] (list decoders: + per-node weights)
    decoder.py  the list decoders ("heft", "etf" order): numba kernels and their plain-Python reference
    train.py    PPO over a family of (graph, cluster) tasks; run directory, checkpoints, resume
    place.py    zero-shot / sampled / fine-tuned placement from a run directory (the compare row "gdp")
    workers.py  gdp's rollout worker (placeto.rollouts.workers)
    cli.py      `placeto train --method gdp`'s library call
"""

from __future__ import annotations

from placeto.methods.base import Method
from placeto.methods.gdp.config import NAME, PRESETS, GdpConfig


def _train(args, graphs, clusters, workers=None) -> int:
    from placeto.methods.gdp.cli import train_from_args

    return train_from_args(args, graphs, clusters, workers=workers)


def _run(variant, graph, cluster, seed=0, budget=None, seconds=None, checkpoint=None, finetune_episodes=0):
    from placeto.methods.gdp.place import run_gdp

    return run_gdp(graph, cluster, checkpoint, seed, budget, seconds, finetune_episodes, variant == "gdp-search")


def _note(graph, cluster, checkpoint, calls):
    from placeto.methods.gdp.place import coarse_note

    return coarse_note(graph, cluster, checkpoint, simulating=calls > 1)  # more than one call: both views scored


def _greedy_calls(checkpoint, graph):
    from placeto.methods.gdp.place import is_gdp_checkpoint, zero_shot_calls

    return zero_shot_calls(checkpoint if is_gdp_checkpoint(checkpoint) else METHOD.default_for(graph.n_nodes))


def _load(run_dir):
    from placeto.methods.gdp.place import load_run

    return load_run(run_dir)


METHOD = Method(
    name=NAME, description="GDP: GraphSAGE + segment-recurrent attention, one-shot placements, PPO on families",
    config_cls=GdpConfig, presets=PRESETS, variants=("gdp", "gdp-search"), train=_train, run=_run, load=_load,
    finetunes=True, default_checkpoint="gdp-general", large_checkpoint="gdp-large", note=_note,
    greedy_calls=_greedy_calls)
