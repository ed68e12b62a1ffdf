"""Choices for running a graph on local devices, importable without JAX.

Light enough for the command line's parser: the execution modes, the rigs, the stage limit, and a device spec's
default rig.
"""

from __future__ import annotations

from typing import Any

from simulator.hardware.devices import default_local_spec

MODES = ("auto", "program", "synthetic")  # the graph's real program, synthetic kernels taking its costs, or either
RIGS = ("threads", "processes")  # this process's JAX devices, or one worker process per host CPU device
MAX_STAGES = 128  # `eval --hardware --max-stages`' default (simulator.hardware.stages: ~40 s of compilation here)


def default_rig(spec: Any) -> str:
    """The --rig default for a device spec: "processes" if all are host CPUs.

    Else "threads". All host CPU devices: a count on a machine without GPUs, or a list of cpu entries only.
    """
    if isinstance(spec, int):
        return "processes" if isinstance(default_local_spec(spec), int) else "threads"
    return "processes" if all(p == "cpu" for p, _ in spec) else "threads"
