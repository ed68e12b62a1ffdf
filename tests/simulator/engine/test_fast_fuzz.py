"""Property-based fuzzing of the simulator with extreme values (hypothesis).

1. Random graphs, placements and clusters (with or without a latency and shared hosts), values drawn from 0,
   subnormals, ordinary numbers and up to 1e308: construction either rejects the input with an InputError or
   accepts it; then the fast engine and the reference either both reject it (the time bound of
   simulator.model.limits) or both return, with equal results.
2. The compiled kernel itself, fed arrays no validation would pass (inf, NaN, negative times, device indices
   out of range, a placement of the wrong length): it returns, it never writes out of bounds (a segfault would
   take pytest down with it).
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from simulator import InputError, simulate, simulate_batch, simulate_reference
from simulator.model.cluster import Cluster, Device, Host
from simulator.engine.fast import _simulate_one, _simulate_rows
from simulator.engine.prepared import prepare_arrays
from simulator.model.graph import make_graph
from simulator.model.limits import MAX_TIME_US
from tests.simulator.engine.test_fast import assert_same

ORDINARY = st.one_of(st.floats(0, 1e6), st.integers(0, 10**6))
ANY = st.sampled_from([0.0, 5e-324, 1e-320, 1e-3, 1.0, 7.5, 1e6, 1e12, 1e13, 1e18, 1e19, 1e300, 1e308])
# The extremes each field accepts (simulator.model.limits), so that cases get past construction to the time bound.
EDGES = {"cost": [0.0, 5e-324, 1e12], "bytes": [0.0, 5e-324, 1e18], "delta": [0.0, 5e-324, 1e9],
         "bandwidth": [1e-3, 1.0, 1e15]}
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cases(draw):
    """(graph, cluster, placements int64[B, N]) or an InputError raised while building them.

    A case draws its numbers from one of three pools: ordinary values, ordinary values and the extremes each
    field accepts, or anything (most such cases are rejected when built)."""
    pool = draw(st.sampled_from(["ordinary", "in_limits", "any"]))

    def value(kind):
        if pool == "ordinary":
            return draw(ORDINARY)
        if pool == "in_limits":
            return draw(st.one_of(ORDINARY, st.sampled_from(EDGES[kind])))
        return draw(st.one_of(ORDINARY, ANY))

    n = draw(st.integers(1, 9))
    n_dev = draw(st.integers(1, 4))
    n_out = [draw(st.integers(0 if i == n - 1 else 1, 3)) for i in range(n)]
    nodes = [{"name": f"v{i}", "cost": value("cost"), "out_bytes": [value("bytes") for _ in range(n_out[i])],
              "persistent_bytes": value("bytes")} for i in range(n)]
    edges = []
    for dst in range(1, n):
        for _ in range(draw(st.integers(0, 3))):
            src = draw(st.integers(0, dst - 1))
            edges.append((src, dst, draw(st.integers(0, n_out[src] - 1))))
    rows = draw(st.lists(st.lists(st.integers(0, n_dev - 1), min_size=n, max_size=n), min_size=1, max_size=4))
    # Optional latency and hosts (Cluster.hosts): none, or 1 to n_dev hosts shared by the devices at random.
    n_hosts = draw(st.integers(0, n_dev))
    latency = value("delta") if draw(st.booleans()) else 0.0
    try:
        graph = make_graph("fuzz", nodes, edges)
        hosts = tuple(Host(f"h{k}", value("delta"), value("delta")) for k in range(n_hosts))
        devices = tuple(Device(f"/d:{i}", "k80", value("bytes"),
                               f"h{draw(st.integers(0, n_hosts - 1))}" if n_hosts else None) for i in range(n_dev))
        cluster = Cluster("fuzz", devices, value("delta"), value("delta"),
                          value("bandwidth") if pool != "ordinary" else 7600.0, latency, hosts)
    except InputError as e:
        return e
    return graph, cluster, np.asarray(rows, dtype=np.int64)


def _outcome(fn, *args):
    try:
        return fn(*args)
    except InputError as e:
        return e


@FUZZ
@given(cases())
def test_fast_equals_reference_or_both_reject(case):
    if isinstance(case, InputError):
        event("rejected when built")
        assert "\n" not in str(case)
        return
    graph, cluster, rows = case
    for row in rows:
        ref, fast = _outcome(simulate_reference, graph, row, cluster), _outcome(simulate, graph, row, cluster)
        assert isinstance(ref, InputError) == isinstance(fast, InputError), (ref, fast)
        if isinstance(ref, InputError):
            event("rejected by the time bound")
            assert str(ref) == str(fast) and "limit" in str(ref)
            continue
        event("simulated")
        assert_same(fast, ref)
        assert np.isfinite(fast.runtime) and fast.runtime < MAX_TIME_US
        assert np.all(np.isfinite(fast.end)) and np.all(np.isfinite(fast.peak_memory))
    batch = _outcome(simulate_batch, graph, rows, cluster, True)
    if not isinstance(batch, InputError):
        assert np.array_equal(batch.runtime, [simulate(graph, row, cluster).runtime for row in rows])


RAW = st.sampled_from([0.0, -1.0, 1.0, 1e-320, 1e308, np.inf, -np.inf, np.nan])


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_kernel_survives_any_numbers_and_device_indices(data):
    n = data.draw(st.integers(1, 6))
    nodes = [{"name": f"v{i}", "cost": 1.0, "out_bytes": [8, 16]} for i in range(n)]
    edges = [(i, j, data.draw(st.integers(0, 1))) for j in range(1, n) for i in range(j)
             if data.draw(st.booleans())]
    n_dev = data.draw(st.integers(1, 3))
    hosts = (Host("h", 1.0, 1.0),)  # one host shared by every device
    cluster = Cluster("raw", tuple(Device(f"/d:{i}", "k80", 1e9, "h") for i in range(n_dev)), 1.0, 1.0, 1.0, 1.0,
                      hosts)
    g = prepare_arrays(make_graph("raw", nodes, edges), cluster)
    g = g._replace(cost=np.asarray(data.draw(st.lists(RAW, min_size=n * n_dev, max_size=n * n_dev)),
                                   dtype=np.float64).reshape(n, n_dev),
                   xfer_time=np.asarray(data.draw(st.lists(RAW, min_size=2 * n, max_size=2 * n))),
                   delta1=data.draw(RAW), delta2=data.draw(RAW), latency=data.draw(RAW),
                   dispatch=np.asarray(data.draw(st.lists(RAW, min_size=n_dev, max_size=n_dev))),
                   send=np.asarray(data.draw(st.lists(RAW, min_size=n_dev, max_size=n_dev))))
    length = data.draw(st.sampled_from([n, n, n - 1, n + 1]))
    dev = np.asarray(data.draw(st.lists(st.integers(-2, n_dev + 1), min_size=length, max_size=length)),
                     dtype=np.int32)
    valid = length == n and bool(np.all((dev >= 0) & (dev < n_dev)))
    s = _simulate_one(g, dev)
    assert (s.done == n) if valid else (s.done == -1)
    if valid:  # the batch kernel on the same rows
        rows = np.stack([dev, dev])
        rows.flags.writeable = False  # as simulate_batch passes them (engine._check_batch): one compiled type
        runtime, peak, done = np.empty(2), np.empty((2, n_dev)), np.empty(2, np.int64)
        _simulate_rows(g, rows, 0, 2, runtime, peak, True, done)
        assert list(done) == [n, n]
        assert np.array_equal(runtime, [s.runtime] * 2, equal_nan=True)


@pytest.mark.parametrize("cost, bandwidth", [(1e308, 7600.0), (1e12, 1e-320), (1.0, 1e308)])
def test_the_reported_extremes_are_input_errors(cost, bandwidth):
    """The tester's cases: a cost of 1e308 or a bandwidth of 1e-320 (once a SIGSEGV) are one-line errors."""
    with pytest.raises(InputError) as e:
        graph = make_graph("g", [{"name": "a", "cost": cost, "out_bytes": [8]}, {"name": "b", "cost": 1.0}],
                           [(0, 1, 0)])
        simulate(graph, [0, 1], Cluster("c", (Device("/0", "k80", 1e9), Device("/1", "k80", 1e9)), 5.7, 25.0,
                                        bandwidth))
    assert "\n" not in str(e.value) and "out of range" in str(e.value)


def test_the_time_bound_names_graph_and_cluster():
    """Values each within its own limit whose sum would not be: the sum check of simulator.model.limits."""
    graph = make_graph("big", [{"name": f"v{i}", "cost": 1e12, "out_bytes": [1e18]} for i in range(3)],
                       [(0, 1, 0), (1, 2, 0)])
    cluster = Cluster("slow", (Device("/0", "k80", 1e18), Device("/1", "k80", 1e18)), 1.0, 1.0, 1e-3)
    for fn in (simulate, simulate_reference):
        with pytest.raises(InputError, match=r"graph 'big' on cluster 'slow': simulated times could reach"):
            fn(graph, [0, 1, 0], cluster)
