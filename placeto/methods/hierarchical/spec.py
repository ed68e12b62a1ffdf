"""The hierarchical MethodSpec: config, presets, inputs, network.

The type is placeto.methods.sequence.pergraph's.
"""

from __future__ import annotations

from placeto.methods.hierarchical.config import PRESETS, HierarchicalConfig
from placeto.methods.hierarchical.model import make_net
from placeto.methods.sequence.op_embed import op_inputs
from placeto.methods.sequence.pergraph import MethodSpec

METHOD = HierarchicalConfig.METHOD

SPEC = MethodSpec(METHOD, HierarchicalConfig, PRESETS,
                  lambda graph, cluster, config: op_inputs(graph, cluster, config.op_types, colocate=False),
                  make_net)
