"""Compilation inside a budget (placeto.compile_time): measured from JAX's and numba's compile events, counted
once where events nest, and the meter's deadline moved by it."""

import numpy as np
import pytest

from placeto import objective as O
from placeto.compile_time import CompileTally, excluded


def test_nested_and_repeated_spans_count_once():
    tally = CompileTally(None)
    assert tally.add(0.0, 1.0) == 1.0
    assert tally.add(0.2, 0.5) == 0.0  # inside the first (a function traced inside another)
    assert tally.add(-1.0, 2.0) == pytest.approx(2.0)  # encloses it: only the new part counts
    assert tally.add(5.0, 6.0) == 1.0
    assert tally.seconds == pytest.approx(4.0) and tally.spans == [(-1.0, 2.0), (5.0, 6.0)]


def test_a_jax_compilation_inside_a_meter_moves_its_deadline():
    import jax
    import jax.numpy as jnp

    f = jax.jit(lambda x: jnp.sin(x) * 3.0 + jnp.cos(x))  # a new function: compiles on its first call
    with O.metered(seconds=100.0) as m, excluded(m) as jit:
        deadline = m.deadline
        f(jnp.ones(11)).block_until_ready()
        first = jit.seconds
        f(jnp.ones(11)).block_until_ready()  # compiled: nothing more to count
    assert first > 0 and jit.seconds == first
    assert m.deadline == pytest.approx(deadline + first)
    with O.metered() as m, excluded(m) as jit:  # no deadline: only counted
        f(jnp.ones(12)).block_until_ready()  # a new shape compiles again
    assert jit.seconds > 0 and m.deadline == float("inf")


def test_a_numba_compilation_is_counted_and_a_compiled_call_is_not():
    import numba

    @numba.njit(cache=False)
    def total(x):
        s = 0.0
        for v in x:
            s += v
        return s

    with excluded() as jit:
        assert total(np.arange(4.0)) == 6.0
    assert jit.seconds > 0
    with excluded() as again:
        total(np.arange(5.0))
    assert again.seconds == 0.0


def test_progress_rate_leaves_out_the_first_compiling_step():
    """placeto.progress.advance: the first step (which compiles) is counted but not timed, so the rate after it
    is that of the later steps, not dragged down by the compile."""
    import io
    import time

    from tqdm import tqdm

    from placeto.progress import advance

    for excluded in (True, False):
        bar = tqdm(total=1000, file=io.StringIO(), mininterval=0, smoothing=0)
        time.sleep(0.3)  # the "compile"
        advance(bar, 1, first=excluded)
        for _ in range(5):
            time.sleep(0.01)
            advance(bar, 1, first=False)
        rate = bar.format_dict["rate"] or (bar.n - bar.initial) / max(bar.format_dict["elapsed"], 1e-9)
        assert bar.n == 6
        assert (rate > 30) == excluded  # 5 steps in ~0.05 s vs 6 in ~0.35 s
        bar.close()
