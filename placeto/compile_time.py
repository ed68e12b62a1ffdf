"""Keep compilation met inside a method's budget out of it.

A method compiles what it runs before its meter opens (`placeto.objective.metered`; the learned methods report
it as compile seconds), but a shape or type first met inside the budget (a smaller last batch, a list
scheduler's kernel not warmed yet, a cold compilation cache after an install) compiles there, and a second of
XLA or LLVM work would count as a second of placing. `excluded(meter)` listens to JAX's and numba's own compile
events while its block runs:

    JAX    /jax/core/compile/{jaxpr_trace,jaxpr_to_mlir_module,backend_compile}_duration (tracing, lowering,
           XLA compilation or a persistent-cache read; jax.monitoring)
    numba  "numba:compile" (numba.core.event; a cache load is not a compilation)

and, for each, moves the meter's deadline later by its wall time, so that the method's budget is spent placing.
Nested events (a jitted function traced inside another, a numba kernel compiling its callees) are counted once:
the tally is the length of the union of their intervals. The method subtracts `CompileTally.seconds` from its
place time and reports it with its compile seconds.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import sys
import threading
import time
from typing import Iterator

from placeto.objective import Meter

JAX_EVENTS = frozenset({"/jax/core/compile/jaxpr_trace_duration",
                        "/jax/core/compile/jaxpr_to_mlir_module_duration",
                        "/jax/core/compile/backend_compile_duration"})
NUMBA_EVENT = "numba:compile"


@dataclasses.dataclass
class CompileTally:
    """Compilation seen inside one `excluded` block."""

    meter: Meter | None  # whose deadline moves by each compilation's seconds (None: only counted)
    seconds: float = 0.0  # wall seconds of compilation, nested events counted once
    spans: list[tuple[float, float]] = dataclasses.field(default_factory=list)  # (start, end) perf_counter, merged

    def add(self, start: float, end: float) -> float:
        """Count [start, end]; return the seconds it newly covers."""
        merged, lo, hi = [], start, end
        for a, b in self.spans:
            if b < lo or a > hi:
                merged.append((a, b))
            else:
                lo, hi = min(lo, a), max(hi, b)
        merged.append((lo, hi))
        merged.sort()
        total = sum(b - a for a, b in merged)
        added = max(0.0, total - sum(b - a for a, b in self.spans))
        self.spans, self.seconds = merged, self.seconds + added
        if self.meter is not None and math.isfinite(self.meter.deadline):
            self.meter.deadline += added
        return added


_TALLIES: contextvars.ContextVar[tuple[CompileTally, ...]] = contextvars.ContextVar("placeto_compile", default=())
_LISTENING: set[str] = set()  # "jax", "numba": listeners registered in this process
_LOCK = threading.Lock()


def _record(start: float, end: float) -> None:
    for tally in _TALLIES.get():
        tally.add(start, end)


def _on_jax_duration(event: str, duration: float, **kwargs) -> None:
    del kwargs
    if event in JAX_EVENTS:  # called as the event ends
        end = time.perf_counter()
        _record(end - duration, end)


def _listen() -> None:
    """Register the compile listeners once per process.

    numba's at once, JAX's once JAX has been imported.

    (A command that never imports JAX does not pay for it here.)
    """
    with _LOCK:
        if "numba" not in _LISTENING:
            from numba.core import event

            class _Numba(event.Listener):
                def __init__(self):
                    self.started = threading.local()

                def on_start(self, ev):
                    stack = getattr(self.started, "stack", None)
                    if stack is None:
                        stack = self.started.stack = []
                    stack.append(time.perf_counter())

                def on_end(self, ev):
                    stack = getattr(self.started, "stack", None)
                    if stack:
                        _record(stack.pop(), time.perf_counter())

            event.register(NUMBA_EVENT, _Numba())
            _LISTENING.add("numba")
        if "jax" not in _LISTENING and "jax" in sys.modules:
            import jax.monitoring

            jax.monitoring.register_event_duration_secs_listener(_on_jax_duration)
            _LISTENING.add("jax")


@contextlib.contextmanager
def excluded(meter: Meter | None = None) -> Iterator[CompileTally]:
    """Extend `meter`'s deadline by this thread's compilation in the block."""
    _listen()
    tally = CompileTally(meter)
    token = _TALLIES.set((*_TALLIES.get(), tally))
    try:
        yield tally
    finally:
        _TALLIES.reset(token)
