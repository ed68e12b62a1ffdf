"""GDP (seed 003, SGDP): a single-shot placer, trained by PPO.

PPO on whole placements.

The network: GraphSAGE node embeddings, a segment-recurrent attention over the nodes in topological order, a
device-count agnostic scoring head. Its placement is read off the network's one forward pass either node by node
independently (the paper's decoder) or by a list decoder that takes the nodes in a list scheduler's order and
conditions each decision on the devices already chosen (config.decoder; the shipped large-graph policy gdp-large, the
default above base.LARGE_GRAPH_NODES nodes).

    config.py   GdpConfig (frozen, `tiny` preset)
    inputs.py   graph + cluster -> padded GdpInputs (no N x N array anywhere)
    model.py    the flax network: GdpInputs -> logits float32[Np, Dm] (list decoders: + per-node weights)
    decoder.py  the list decoders ("heft", "etf" order): numba kernels and their plain-Python reference
    ppo.py      the PPO step on one task, shared by training and fine-tuning
    train.py    PPO over a family of (graph, cluster) tasks; run directory, checkpoints, resume
    place.py    zero-shot / sampled / fine-tuned placement from a run directory (the compare row "gdp")
    workers.py  gdp's rollout worker (placeto.rollouts.workers)
    cli.py      `placeto train --method gdp`'s library call
"""

from __future__ import annotations

from placeto.methods.base import Method, Ref
from placeto.methods.gdp.config import DEFAULT_CHECKPOINT, LARGE_CHECKPOINT, NAME, PRESETS, GdpConfig

METHOD = Method(
    name=NAME, description="GDP: GraphSAGE + segment-recurrent attention, one-shot placements, PPO on families",
    config_cls=GdpConfig, presets=PRESETS, variants=("gdp", "gdp-search"),
    train=Ref("placeto.methods.gdp.cli:train_from_args"), run=Ref("placeto.methods.gdp.place:run_variant"),
    load=Ref("placeto.methods.gdp.place:load_run"), finetunes=True, default_checkpoint=DEFAULT_CHECKPOINT,
    large_checkpoint=LARGE_CHECKPOINT, note=Ref("placeto.methods.gdp.place:placing_note"),
    greedy_calls=Ref("placeto.methods.gdp.place:greedy_calls"))
