"""The hierarchical planner (Mirhoseini et al., ICLR 2018; seed 001), trained per graph with REINFORCE.

    config.py   HierarchicalConfig (frozen, `tiny` preset)
    model.py    feed-forward Grouper (a softmax over G groups per op) + seq2seq Placer over group embeddings

It reads raw op graphs (no colocation items, no prior grouping): inputs are placeto.methods.op_embed's with one
item per op, which the model ignores, and positions in the depth-first order (the block prior's blocks). Shared
with rnn: op embeddings, the seq2seq placer, REINFORCE, the run directory, placing and the compare row (see
placeto.methods.rnn).
"""

from placeto.methods.hierarchical.config import PRESETS, HierarchicalConfig
from placeto.methods.hierarchical.model import make_net
from placeto.methods.op_embed import op_inputs
from placeto.methods.pergraph import MethodSpec

METHOD = HierarchicalConfig.METHOD

SPEC = MethodSpec(METHOD, HierarchicalConfig, PRESETS,
                  lambda graph, cluster, config: op_inputs(graph, cluster, config.op_types, colocate=False),
                  make_net)
