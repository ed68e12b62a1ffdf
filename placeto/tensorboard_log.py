"""A run directory's TensorBoard scalars (<run>/tb/), written in the calling thread.

tensorboardX's SummaryWriter hands every event to a background thread through a multiprocessing.Queue, which has
a feeder thread of its own and an exit handler that joins it. Both go wrong in a training run:
* an error of the disk (ENOSPC) is raised in that thread, where the run never sees it: the command goes on
  without its scalars and says nothing;
* a stop signal is raised (simulator.interrupts) wherever the main thread is; inside the queue's `put` it can
  leave the queue's lock held, and the writer's `close` on the way out, or the queue's exit handler, then waits
  for it forever.

So this writer uses tensorboardX's own event file and protocol buffers (`EventsWriter`, `summary.scalar`) in the
caller's thread, one event per logged row: a full disk is an OSError naming the directory (placeto.cli.main's one
line), and a record is written whole before a signal is raised (`interrupts.deferred`). The files are the ones
SummaryWriter writes (tb/events.out.tfevents.<time>.<host>), read by TensorBoard as before.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Mapping

from tensorboardX.event_file_writer import EventsWriter
from tensorboardX.proto.event_pb2 import Event
from tensorboardX.proto.summary_pb2 import Summary
from tensorboardX.summary import scalar

from placeto.metrics_log import naming
from simulator.interrupts import deferred


class ScalarWriter:
    """TensorBoard scalars of one run, appended to a new event file in `logdir`."""

    def __init__(self, logdir: Path):
        self.logdir = Path(logdir)
        with naming(self.logdir):
            self.logdir.mkdir(parents=True, exist_ok=True)
            self._events: EventsWriter | None = EventsWriter(str(self.logdir / "events"))

    def add(self, scalars: Mapping[str, float], step: int) -> None:
        """One event at `step` holding every finite number of `scalars` (its other values are left out)."""
        values = [v for k, x in scalars.items() if _finite(x) for v in scalar(k, float(x)).value]
        if not values or self._events is None:
            return
        event = Event(wall_time=time.time(), step=int(step), summary=Summary(value=values))
        with deferred(), naming(self.logdir):
            self._events.write_event(event)

    def flush(self) -> None:
        """What was added, on disk (written through and synced)."""
        if self._events is not None:
            with deferred(), naming(self.logdir):
                self._events.flush()

    def close(self) -> None:
        """Flush and close the event file; later calls do nothing."""
        events, self._events = self._events, None
        if events is not None:
            with deferred(), naming(self.logdir):
                events.close()


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
