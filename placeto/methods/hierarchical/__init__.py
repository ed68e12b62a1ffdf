"""The hierarchical planner (Mirhoseini et al., ICLR 2018), trained per graph.

Seed 001; trained with REINFORCE.

    config.py   HierarchicalConfig (frozen, `tiny` preset)
    model.py    feed-forward Grouper (a softmax over G groups per op) + seq2seq Placer over group embeddings

It reads raw op graphs (no colocation items, no prior grouping): inputs are placeto.methods.sequence.op_embed's
with one item per op, which the model ignores, and positions in the depth-first order (the block prior's blocks).
Shared with rnn: op embeddings, the seq2seq placer, REINFORCE, the run directory, placing and the compare row
(see placeto.methods.rnn). The MethodSpec (config, presets, inputs, network) the shared per-graph code looks up
is spec.py's.
"""

from __future__ import annotations

from placeto.methods.hierarchical.config import PRESETS, HierarchicalConfig
from placeto.methods.sequence.method import pergraph_method

METHOD = pergraph_method(
    HierarchicalConfig, PRESETS, "hierarchical planner (2018): Grouper + seq2seq Placer, REINFORCE per graph")
