"""Progress bars whose rate and ETA skip the compiling first step.

A training run's first update compiles the policy (tens of seconds on a CPU) and then runs in a fraction of a
second: a tqdm bar fed that first step shows an ETA of hours until its average catches up. `advance` moves the bar
by the first step's count without timing it (the bar's clock and its rate start after it), then by later steps as
`tqdm.update` does.
"""

from __future__ import annotations

import time

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
