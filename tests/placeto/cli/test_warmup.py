"""placeto.cli.warmup compiles the numba kernels that the common calls run: after it, none of them compiles anything
anew (a call with another array type, say a read-only or int64 placement, would compile a second variant)."""

from pathlib import Path

import numpy as np
import pytest
from numba.core import event

from placeto.cli import warmup
from placeto.baselines import run_method
from simulator import cluster_preset, load_graph, simulate
from simulator.engine.fast import simulate_batch

ROOT = Path(__file__).resolve().parents[3]


def test_after_warmup_the_common_calls_compile_nothing():
    warmup.warm()  # (`make test` ran it before the suite: here it loads the kernels from numba's cache)
    graph = load_graph(ROOT / "datasets" / "nmt" / "nmt_002.json.gz")  # a dataset file, not warmup's graphs
    cluster = cluster_preset("placeto-k80", 4)
    n = graph.n_nodes
    with event.install_recorder("numba:compile") as rec:
        simulate(graph, [k % 4 for k in range(n)], cluster).peak_memory  # a list of ints
        batch = np.stack([np.zeros(n, np.int64), np.arange(n) % 4])  # int64, writable
        frozen = batch.astype(np.int32)
        frozen.flags.writeable = False  # as np.asarray gives a JAX array
        for placements in (batch, frozen):
            simulate_batch(graph, placements, cluster, with_memory=True)
            simulate_batch(graph, placements, cluster)
        for method in ("etf", "m-sct", "m-topo", "heft", "local-search"):
            run_method(method, graph, cluster, 0, budget=20)
    compiled = sorted({f"{e.data['dispatcher'].py_func.__module__}.{e.data['dispatcher'].py_func.__qualname__}"
                       for _, e in rec.buffer if e.is_start})
    assert not compiled, compiled


def test_parts_and_bad_parts():
    assert warmup.PARTS == ("simulator", "schedulers")
    with pytest.raises(SystemExit) as e:
        warmup.main(["simulator", "no-such-part"])
    assert e.value.code == 2
