"""GDP (seed 003, SGDP): a single-shot placer. GraphSAGE node embeddings, a segment-recurrent attention over
the nodes in topological order, a device-count agnostic scoring head; trained with PPO on whole placements.

    config.py   GdpConfig (frozen, `tiny` preset)
    inputs.py   graph + cluster -> padded GdpInputs (no N x N array anywhere)
    model.py    the flax network: GdpInputs -> logits float32[Np, Dm]
    train.py    PPO over a family of (graph, cluster) tasks; run directory, checkpoints, resume
    place.py    zero-shot / sampled / fine-tuned placement from a run directory (the compare row "gdp")
"""

METHOD = "gdp"  # config.json's "method" field of a gdp run directory
