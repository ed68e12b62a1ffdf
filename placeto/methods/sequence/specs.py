"""The per-graph methods' MethodSpecs by name.

placeto.methods.sequence.pergraph describes the type; the code the methods share (rundir, place, cli) looks a
method up here. This module sits above rnn/spec.py and hierarchical/spec.py, which import pergraph.py's config
base, so that no import goes in a circle.
"""

from __future__ import annotations

from placeto.methods.hierarchical.spec import SPEC as HIERARCHICAL
from placeto.methods.rnn.spec import SPEC as RNN
from placeto.methods.sequence.pergraph import PER_GRAPH, MethodSpec

SPECS: dict[str, MethodSpec] = {"rnn": RNN, "hierarchical": HIERARCHICAL}


def get_spec(name: str) -> MethodSpec:
    """The MethodSpec of "rnn" or "hierarchical" (ValueError otherwise)."""
    if name not in SPECS:
        raise ValueError(f"not a per-graph method: {name!r} (known: {', '.join(PER_GRAPH)})")
    return SPECS[name]
