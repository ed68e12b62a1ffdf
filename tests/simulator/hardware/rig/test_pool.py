"""simulator.hardware.rig.pool / rig_plans / rig_worker / concurrency_check: placed steps on one worker process per device.

No GPU; a rig of 2 workers starts in about 2 s (a fresh interpreter importing jax each). Timings are not asserted
here (experiments/benchmarks/rig_concurrency.py measures them): only that the numbers exist.
"""

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import jax  # noqa: E402

from tests.helpers.programs import mlp_step  # noqa: E402
from simulator.measure import concurrency as concurrency_check  # noqa: E402
from simulator.tracing import lowering
from simulator.hardware import plans
from simulator.model.errors import InputError  # noqa: E402
from simulator.grouping.group import group  # noqa: E402
from simulator.hardware.rig.pool import ProcessRig, RigError, worker_flags  # noqa: E402
from simulator.hardware.rig.plans import to_rig  # noqa: E402
from simulator.hardware.rig.worker import Run  # noqa: E402
from simulator.hardware.timing import time_interleaved  # noqa: E402
from simulator.tracing.trace import trace  # noqa: E402


@pytest.fixture(scope="module")
def rig():
    with ProcessRig(2, timeout_s=60) as r:
        yield r


@pytest.fixture(scope="module")
def program():
    step, *args = mlp_step((8, 32, 32, 32, 4), batch=8)
    traced = trace(step, *args)
    return traced, group(traced.graph, 10), lowering.leaf_values(traced, args), jax.jit(step)(*args)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone too
        return f.read().split(")")[-1].split()[0] != "Z"


def _close(a, b):
    return all(np.allclose(x, y, rtol=1e-5, atol=1e-6) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.mark.parametrize("stages", [True, False])
def test_placed_steps_on_the_rig_equal_the_plain_jit(rig, program, stages):
    traced, grouping, values, reference = program
    dev = jax.devices()[0]
    for seed in range(2):
        placement = np.random.default_rng(seed).integers(0, 2, grouping.graph.n_nodes)
        assert len(set(placement.tolist())) == 2
        plan = plans.program_plan(traced, values, placement, [dev, dev], grouping.op_to_group, stages=stages)
        on_rig = to_rig(plan, rig, scope="mlp")
        try:
            assert on_rig.workers == (0, 1) and on_rig.block_bytes > 0  # both devices, values crossing
            for _ in range(2):  # a second step reuses the resident values
                on_rig.run_step()
                assert _close(on_rig.outputs(), reference)
            runs = [e for evs in on_rig.events.values() for e in evs if e.kind == "run"]
            assert len(runs) == sum(t.fn is not None for t in plan.tasks)
            assert all(e.end_ns >= e.start_ns for e in runs)
            (times,) = time_interleaved([on_rig], repeats=2, warmup=1)
            assert len(times) == 2 and min(times) > 0
        finally:
            on_rig.close()
    assert not rig.blocks  # every plan's shared memory unlinked on close


def test_a_plan_for_other_devices_is_refused(rig, program):
    traced, grouping, values, _ = program
    dev = jax.devices()[0]
    plan = plans.program_plan(traced, values, np.zeros(grouping.graph.n_nodes, int), [dev] * 3,
                              grouping.op_to_group)
    with pytest.raises(InputError, match="3 devices, the process rig 2"):
        to_rig(plan, rig)


def test_concurrency_check_returns_a_number(rig):
    chains = concurrency_check.rig_chains(rig, size=64, length=2)
    try:
        speedup = concurrency_check.speedup(chains, rounds=2)
    finally:
        chains.close()
    assert np.isfinite(speedup) and speedup > 0
    overlap = concurrency_check.measure({"numpy": concurrency_check.numpy_chains(2, size=64, length=2),
                                         "host": concurrency_check.host_chains(jax.devices()[:1] * 2, 64, 2)}, 2)
    assert set(overlap) == {"numpy", "host"} and all(o.speedup > 0 and o.n == 2 for o in overlap.values())


def test_a_worker_error_is_one_line_and_closes_the_rig():
    with ProcessRig(1, timeout_s=30) as r:
        pids = r.pids
        with pytest.raises(RigError, match=r"worker 0 failed in 'run': KeyError"):
            r.call(0, ("run", 12345))  # no such plan
        assert r.closed
        with pytest.raises(RigError, match="closed"):
            r.call(0, ("run", 12345))
    assert not any(_alive(p) for p in pids)


def test_a_killed_worker_is_an_error_not_a_hang():
    r = ProcessRig(2, timeout_s=30)
    pids = r.pids
    r.processes[1].kill()
    r.processes[1].wait(10)
    with pytest.raises(RigError, match=r"worker 1 (died|cannot be reached)"):
        r.call_all({0: ("drop", ()), 1: ("drop", ())})
    assert r.closed and not any(_alive(p) for p in pids)


def test_a_stuck_worker_times_out(program):
    """Worker 1 waits for a batch worker 0 never sends: the worker's own wait times out, then the rig says so."""
    from simulator.hardware.rig.worker import Recv, Slot

    with ProcessRig(2, timeout_s=1.0) as r:
        name = r.block(64)
        r.call(1, ("plan", 7, (Recv(0, 0, (Slot(1, 0, (2,), "float32"),)),), name, ()))
        with pytest.raises(RigError, match="no batch 0 from worker 0 within 1 s"):
            r.call(1, ("run", 7))
        assert not r.blocks  # unlinked on the way down


def test_a_worker_that_does_not_answer_times_out():
    import signal

    r = ProcessRig(1, timeout_s=30)
    pids = r.pids
    os.kill(pids[0], signal.SIGSTOP)  # alive, silent
    with pytest.raises(RigError, match="worker 0 did not answer 'drop' within 0.5 s"):
        r.call(0, ("drop", ()), timeout_s=0.5)
    assert r.closed and not any(_alive(p) for p in pids)  # killed on the way down


def test_no_leaked_processes_or_shared_memory(program):
    traced, grouping, values, _ = program
    dev = jax.devices()[0]
    r = ProcessRig(2, timeout_s=60)
    pids = r.pids
    plan = plans.program_plan(traced, values, np.arange(grouping.graph.n_nodes) % 2, [dev, dev],
                              grouping.op_to_group)
    on_rig = to_rig(plan, r)
    on_rig.run_step()
    block = Path("/dev/shm") / on_rig.block.lstrip("/")
    assert block.exists()  # the plan's block exists while it lives (other programs' blocks are not ours to count)
    r.close()  # without closing the plan first
    assert not any(_alive(p) for p in pids)
    assert not block.exists()


def test_workers_get_one_device_and_serial_flags():
    assert worker_flags("--xla_force_host_platform_device_count=4 --xla_foo=1") == \
        "--xla_foo=1 --xla_cpu_multi_thread_eigen=false"
    with ProcessRig(1, timeout_s=60) as r:
        probe = subprocess.run(["cat", f"/proc/{r.pids[0]}/environ"], capture_output=True).stdout.split(b"\0")
        flags = [e for e in probe if e.startswith(b"XLA_FLAGS=")]
        assert flags == [b"XLA_FLAGS=--xla_cpu_multi_thread_eigen=false"] or b"device_count" not in flags[0]


def test_bad_rig_arguments():
    with pytest.raises(InputError, match="positive device count"):
        ProcessRig(0)
    with pytest.raises(InputError, match="timeout"):
        ProcessRig(1, timeout_s=0)


def test_a_run_plan_on_one_worker(rig):
    """The rig's raw protocol: a stage exported and run on worker 1 alone."""
    import jax.numpy as jnp

    def stage(token, x):
        return token, x * 2.0 + 1.0

    blob = bytes(jax.export.export(jax.jit(stage))(jax.ShapeDtypeStruct((), jnp.int8),
                                                   jax.ShapeDtypeStruct((3,), jnp.float32)).serialize())
    sid, pid, x, y = (rig.new_id() for _ in range(4))
    rig.call(1, ("load", [(sid, blob)]))
    rig.call(1, ("put", [(x, np.arange(3, dtype=np.float32))]))
    rig.call(1, ("plan", pid, (Run(sid, 0, (x,), (y,)),), None, (y,)))
    rig.call(1, ("run", pid))
    (out,) = rig.call(1, ("fetch", pid, (y,)))
    np.testing.assert_allclose(out, [1.0, 3.0, 5.0])
    rig.call(1, ("free", pid))


def test_a_plans_first_stage_compiles_once():
    """rig_worker: a plan's token starts committed to the device, as a stage returns it, so the stage that takes
    the first token compiles in the first step only (uncommitted, jit compiled it again in the second step, its
    cache keyed on that: a one-stage placement's warm-up doubled)."""
    import jax.numpy as jnp

    from simulator.hardware.rig import worker as rig_worker

    def stage(token, x):
        return token, x + 1.0

    blob = bytes(jax.export.export(jax.jit(stage))(jax.ShapeDtypeStruct((), jnp.int8),
                                                   jax.ShapeDtypeStruct((2,), jnp.float32)).serialize())
    state = {"stages": {}, "plans": {}}
    rig_worker._load(state, [(7, blob), (8, blob)])
    assert sorted(state["stages"]) == [7, 8]
    rig_worker._plan(state, 1, (), None, ())
    fn, token, x = state["stages"][7], state["plans"][1]["token"], np.zeros(2, np.float32)
    for _ in range(3):  # three steps: the same input, the token the last step returned
        token, y = fn(token, x)
    np.testing.assert_allclose(y, [1.0, 1.0])
    assert fn._cache_size() == 1


def test_time_interleaved_times_a_rig_plan_and_reports_every_step():
    """Anything with run_step() is timed as a Plan is; reporting_steps sees every step interleaved_steps counts."""
    from simulator.hardware.timing import interleaved_steps, reporting_steps

    class Counted:
        runs = 0

        def run_step(self):
            Counted.runs += 1

    seen = []
    with reporting_steps(lambda: seen.append(1)):
        times = time_interleaved([Counted(), Counted()], repeats=3, warmup=2)
    assert [len(t) for t in times] == [3, 3]
    assert len(seen) == Counted.runs == interleaved_steps(2, 3, 2)


def test_one_core_pins_every_thread_and_restores():
    from simulator.hardware.rig.pool import free_cores, one_core

    before = os.sched_getaffinity(0)
    with one_core() as core:
        assert core == free_cores()[0]
        tasks = os.listdir("/proc/self/task")
        assert all(os.sched_getaffinity(int(t)) == {core} for t in tasks if os.path.exists(f"/proc/self/task/{t}"))
    assert os.sched_getaffinity(0) == before


def test_rig_choice_errors_are_one_line(tmp_path, capsys):
    from placeto.cli.main import main
    from simulator.hardware.runner import start_rig

    with pytest.raises(InputError, match="unknown rig 'fibers'"):
        start_rig("fibers", jax.devices()[:1])
    assert start_rig("threads", jax.devices()[:1]) is None
    code = main(["place", "datasets/nmt/nmt_002.json.gz", "--rig", "processes", "--out", str(tmp_path / "p.json")])
    assert code == 2 and "--rig is about running the placements on local devices: it needs --hardware" in \
        capsys.readouterr().err
    code = main(["place", "datasets/nmt/nmt_002.json.gz", "--hardware", "--rig", "threads", "--gantt",
                 str(tmp_path / "g.png"), "--out", str(tmp_path / "p.json")])
    assert code == 2 and "--gantt" in capsys.readouterr().err


def test_graph_contention_runs_the_whole_step_alone_and_beside_itself(rig, program):
    """simulator.measure.rig_step.graph_contention: the whole step on worker 0 alone and while worker 1 runs it too; both
    stage times measured, the factor is their ratio - 1 (not below 0), and both plans are freed afterwards."""
    from types import SimpleNamespace

    from simulator.measure.rig_step import graph_contention

    traced, grouping, values, _ = program
    dev = jax.devices()[0]
    made = []

    def runnable(placement):
        made.append(set(placement.tolist()))
        plan = plans.program_plan(traced, values, placement, [dev, dev], grouping.op_to_group, stages=True)
        return to_rig(plan, rig, scope="mlp")

    runner = SimpleNamespace(rig=rig, graph=grouping.graph, runnable=runnable)
    c = graph_contention(runner, steps=3, warmup=1)
    assert made == [{0}, {1}]  # the whole step on each worker
    assert c.alone_us > 0 and c.together_us > 0
    assert c.factor == pytest.approx(max(0.0, c.together_us / c.alone_us - 1.0))
    assert not rig.blocks  # both plans closed (their shared memory unlinked)
    with pytest.raises(InputError, match="two workers of a process rig"):
        graph_contention(SimpleNamespace(rig=None, graph=grouping.graph, runnable=runnable))


def test_worker_env_adds_the_malloc_settings_and_keeps_the_callers():
    from simulator.hardware.rig.pool import WORKER_MALLOC, worker_env

    env = worker_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=4:glibc.cpu.x86_ibt=0", "XLA_FLAGS": ""})
    tunables = env["GLIBC_TUNABLES"].split(":")
    assert tunables[:2] == ["glibc.malloc.arena_max=4", "glibc.cpu.x86_ibt=0"]  # the caller's, first and kept
    assert set(tunables) == {"glibc.malloc.arena_max=4", "glibc.cpu.x86_ibt=0"} | {
        t for t in WORKER_MALLOC if not t.startswith("glibc.malloc.arena_max=")}
    assert env["JAX_PLATFORMS"] == "cpu" and worker_env({})["GLIBC_TUNABLES"] == ":".join(WORKER_MALLOC)


def test_a_worker_does_not_fault_in_a_freed_buffer_again():
    """A stage making a 64 MB value, freed after each step: with glibc's defaults each step maps it afresh
    (16,384 pages faulted in); a worker keeps it (WORKER_MALLOC), so most steps fault nothing in. The heap may
    still grow now and then (XLA frees a step's buffers on its own thread, so two may be alive at once; under
    load, in a few steps of a run), hence the median over the steps, not their sum."""
    import jax.numpy as jnp

    n = 16 * 2**20  # float32: 64 MB, above glibc's largest dynamic mmap threshold (32 MB)

    def stage(token, x):
        return token, jnp.broadcast_to(x, (n,)) + 1.0

    blob = bytes(jax.export.export(jax.jit(stage))(jax.ShapeDtypeStruct((), jnp.int8),
                                                   jax.ShapeDtypeStruct((), jnp.float32)).serialize())
    with ProcessRig(1, timeout_s=60) as rig:
        sid, pid, x, y = (rig.new_id() for _ in range(4))
        rig.call(0, ("load", [(sid, blob)]))
        rig.call(0, ("put", [(x, np.float32(2.0))]))
        rig.call(0, ("plan", pid, (Run(sid, 0, (x,), (y,)),), None, ()))

        def faults() -> int:
            with open(f"/proc/{rig.pids[0]}/stat") as f:
                return int(f.read().split(")")[-1].split()[7])  # minflt

        for _ in range(3):
            rig.call(0, ("run", pid))
        per_step = []
        for _ in range(9):
            before = faults()
            rig.call(0, ("run", pid))
            per_step.append(faults() - before)
        assert np.median(per_step) < 16_384 // 4, per_step  # glibc's defaults: about 16,384 every step
