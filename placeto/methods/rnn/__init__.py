"""The RNN placer (Mirhoseini et al., ICML 2017; seeds 000 and 002), trained per graph with REINFORCE.

    config.py   RnnConfig (frozen, `tiny` preset)
    model.py    op embeddings -> bidirectional LSTM encoder -> attentional LSTM decoder, a device per item

Shared with the hierarchical planner: op embeddings (placeto.methods.op_embed), the seq2seq placer
(placeto.methods.seq2seq), REINFORCE (placeto.methods.reinforce), the run directory (placeto.methods.rundir),
placing and the compare row (placeto.methods.pergraph_place).
"""

from placeto.methods.op_embed import op_inputs
from placeto.methods.pergraph import MethodSpec
from placeto.methods.rnn.config import PRESETS, RnnConfig
from placeto.methods.rnn.model import make_net

METHOD = RnnConfig.METHOD

SPEC = MethodSpec(METHOD, RnnConfig, PRESETS,
                  lambda graph, cluster, config: op_inputs(graph, cluster, config.op_types, config.colocate),
                  make_net)
