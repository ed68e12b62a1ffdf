"""The per-graph methods' MethodSpecs by name (placeto.methods.sequence.pergraph describes the type): what the code they
share (rundir, pergraph_place, pergraph_cli) looks a method up with. It sits above rnn/spec.py and
hierarchical/spec.py, which import pergraph.py's config base, so that no import goes in a circle.
"""

from __future__ import annotations

from placeto.methods.sequence.pergraph import PER_GRAPH, MethodSpec


def get_spec(name: str) -> MethodSpec:
    """The MethodSpec of "rnn" or "hierarchical" (ValueError otherwise)."""
    if name == "rnn":
        from placeto.methods.rnn.spec import SPEC
    elif name == "hierarchical":
        from placeto.methods.hierarchical.spec import SPEC
    else:
        raise ValueError(f"not a per-graph method: {name!r} (known: {', '.join(PER_GRAPH)})")
    return SPEC
