"""simulator.hardware.synthetic: synthetic kernels take about their nodes' recorded costs (timed: a serial test,
in its own subprocess on 2 host devices; tests/conftest.py)."""

import textwrap

import numpy as np

from tests.helpers.scripts import run_script



SYNTHETIC = textwrap.dedent('''
    import json
    from simulator.hardware.devices import ensure_host_devices
    ensure_host_devices(2)
    import numpy as np
    from simulator import make_graph
    from simulator.measure.calibrate import profile_plan
    from simulator.model.cluster import Cluster, Device
    from simulator.hardware.runner import hardware_runner

    costs = [1000.0, 2000.0, 4000.0, 8000.0]  # a cost-only chain
    nodes = [{"name": f"n{i}", "cost": c, "out_bytes": [4096]} for i, c in enumerate(costs)]
    chain = make_graph("chain", nodes, [(i, i + 1, 0) for i in range(3)])
    cluster = Cluster("c", tuple(Device(f"/cpu:{i}", "local-cpu", 1e12) for i in range(2)), 0.0, 0.0, 1e4)
    runner = hardware_runner(chain, cluster)
    t = runner.measure([np.zeros(4, np.int32), np.array([0, 1, 0, 1], np.int32)], repeats=5, warmup=1)
    plan = runner.plan(np.zeros(4, np.int32))
    alone = np.min([profile_plan(plan) for _ in range(3)], axis=0)  # each a median of 5; a burst of load hits one
    print(json.dumps({"mode": runner.mode, "one_device_min_us": t[0].min_us, "alternating_min_us": t[1].min_us,
                      "alone_us": alone.tolist()}))
''')


def synthetic_misses(syn: dict) -> list[str]:
    """What a SYNTHETIC report gets wrong: a chain of 1, 2, 4 and 8 ms nodes should take about 15 ms on one device
    and alternating (a chain stays a chain across devices), and each node timed alone its cost plus a fixed
    overhead of timing one unit (dispatch, wait; about 1.4 ms in one run on a 2-core VM, which failed a ratio test
    of the largest to the smallest): fit alone = overhead + slope x cost."""
    slope, overhead = np.polyfit([1000.0, 2000.0, 4000.0, 8000.0], np.array(syn["alone_us"]), 1)
    checks = {"mode": syn["mode"] == "synthetic",
              "one device": 0.5 * 15000 < syn["one_device_min_us"] < 2.5 * 15000,
              "alternating": 0.5 * 15000 < syn["alternating_min_us"] < 2.5 * 15000,
              "slope": 0.5 < slope < 2.0, "overhead": -500 < overhead < 3000}
    return [f"{name}: {syn} (slope {slope:.2f}, overhead {overhead:.0f} us)" for name, ok in checks.items() if not ok]


def test_synthetic_kernels_track_costs():
    """Measured once more, in a fresh process, when the first measurement misses: the kernels' speed is measured
    when the process starts, and a burst of load then on a shared machine skews every node's time (a
    fresh clone's serial half measured slope 0.44 once: 622-3,724 us for 1-8 ms; the same test passed 3 times in a
    row right after)."""
    misses = synthetic_misses(run_script(SYNTHETIC))
    if misses:
        misses = synthetic_misses(run_script(SYNTHETIC))
    assert not misses, misses
