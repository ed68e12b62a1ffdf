"""Progress bars whose rate and ETA skip the compiling first step.

A training run's first update compiles the policy (tens of seconds on a CPU) and then runs in a fraction of a
second: a tqdm bar fed that first step shows an ETA of hours until its average catches up. `advance` moves the bar
by the first step's count without timing it (the bar's clock and its rate start after it), then by later steps as
`tqdm.update` does. `estimated` is a bar through a phase with no steps to count (a profile's compilation and
trace), against an estimate of its duration.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Any, Iterator

from tqdm import tqdm


def ms(us: float) -> str:
    """A step time for a bar's postfix, in ms as everything else prints it: 1234.5 us -> "1.234ms"."""
    return f"{us / 1e3:.3f}ms"


def advance(bar: tqdm, n: int, first: bool) -> None:
    """Move `bar` by `n`; time it unless `first`.

    The `first` step (the one that compiled) is counted, and the bar's timing starts after it.
    """
    if not first or bar.disable:  # a disabled bar keeps no clock
        bar.update(n)
        return
    bar.n += n
    bar.initial += n  # the average rate counts from here
    bar.last_print_n = bar.n
    bar.start_t = bar.last_print_t = time.time()
    bar.refresh()


@contextlib.contextmanager
def estimated(desc: str, seconds: float, file: Any = None) -> Iterator[tqdm]:
    """A bar on stderr through a phase that has no steps to count, against its estimated `seconds`.

    Redrawn every second from the clock: the elapsed time over the estimate, held at 99% while the phase runs past
    it (the remaining time then reads 0 until it ends). On a terminal only (tqdm's disable=None), so logs get only
    the lines the caller prints.
    """
    total = max(1, round(seconds))
    bar = tqdm(total=total, desc=desc, disable=None, leave=False, file=file or sys.stderr, smoothing=0,
               bar_format="{desc}: {percentage:3.0f}% [{elapsed}<{remaining}, estimated]")
    stop = threading.Event()
    start = time.monotonic()

    def tick() -> None:
        while not stop.wait(1.0):
            bar.n = min(int(time.monotonic() - start), total - 1)
            bar.refresh()

    ticker = threading.Thread(target=tick, daemon=True)
    if not bar.disable:
        ticker.start()
    try:
        yield bar
    finally:
        stop.set()
        if ticker.is_alive():
            ticker.join()
        bar.close()
