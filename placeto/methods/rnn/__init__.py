"""The RNN placer (Mirhoseini et al., ICML 2017), trained per graph.

Seeds 000 and 002; trained with REINFORCE.

    config.py   RnnConfig (frozen, `tiny` preset)
    model.py    op embeddings -> bidirectional LSTM encoder -> attentional LSTM decoder, a device per item

Shared with the hierarchical planner: op embeddings (placeto.methods.sequence.op_embed), the seq2seq placer
(placeto.methods.sequence.seq2seq), REINFORCE (placeto.methods.sequence.reinforce), the run directory
(placeto.methods.sequence.rundir), placing and the compare row (placeto.methods.sequence.place). The MethodSpec
(config, presets, inputs, network) the shared per-graph code looks up is spec.py's.
"""

from __future__ import annotations

from placeto.methods.rnn.config import PRESETS, RnnConfig
from placeto.methods.sequence.method import pergraph_method

METHOD = pergraph_method(
    RnnConfig, PRESETS, "RNN placer (2017): op embeddings, seq2seq LSTM with attention, REINFORCE per graph")
