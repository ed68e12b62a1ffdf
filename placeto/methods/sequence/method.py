"""The `Method` of a per-graph placer (rnn, hierarchical).

The same train / run / load over the shared per-graph code (placeto.methods.sequence.cli, .place, .rundir),
differing only in name, description and config class.
"""

from __future__ import annotations

from typing import Any

from placeto.methods.base import Method, Ref


def pergraph_method(config_cls: type, presets: dict[str, Any], description: str) -> Method:
    """The Method of per-graph placer `config_cls.METHOD`.

    Its compare row has the same name.
    """
    name = config_cls.METHOD
    return Method(name=name, description=description, config_cls=config_cls, presets=presets, variants=(name,),
                  train=Ref("placeto.methods.sequence.cli:train_from_args", (name,)),
                  run=Ref("placeto.methods.sequence.place:run_method"),
                  load=Ref("placeto.methods.sequence.rundir:load_params"), per_graph=True)
