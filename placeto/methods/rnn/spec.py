"""The rnn method's MethodSpec: config, presets, inputs and network.

The type is placeto.methods.sequence.pergraph's.
"""

from __future__ import annotations

from placeto.methods.sequence.op_embed import op_inputs
from placeto.methods.sequence.pergraph import MethodSpec
from placeto.methods.rnn.config import PRESETS, RnnConfig
from placeto.methods.rnn.model import make_net

METHOD = RnnConfig.METHOD

SPEC = MethodSpec(METHOD, RnnConfig, PRESETS,
                  lambda graph, cluster, config: op_inputs(graph, cluster, config.op_types, config.colocate),
                  make_net)
