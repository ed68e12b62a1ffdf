"""simulator.hardware.dispatch with plans, lowering and the eval and calibrate commands: placed execution on real
(host) devices, end to end.

The checks run in a subprocess started with XLA_FLAGS for 2 host devices (this process may have started JAX with
one device already); it prints a JSON report the tests assert on. Nothing they assert depends on speed, so the
module runs beside other tests (on one worker: its fixture once).
"""

import json
import textwrap
from pathlib import Path

import pytest

from simulator.model.cluster import load_cluster
from simulator.hardware.devices import SERIAL_CPU_FLAGS

from tests.helpers.scripts import run_script

ROOT = Path(__file__).resolve().parents[3]

# its module fixture is costly: `make test` (--dist loadgroup) runs the module on one worker, so it runs once
pytestmark = pytest.mark.xdist_group("test_dispatch")


SCRIPT = textwrap.dedent('''
    import contextlib, io, json, sys, time
    from simulator.hardware.devices import ensure_host_devices
    ensure_host_devices(2)  # XLA_FLAGS already asks for 2: this adds the single-thread flags
    import jax, jax.numpy as jnp, numpy as np, optax
    from simulator import make_graph, save_graph, save_placement
    from simulator.hardware import dispatch as hw, devices as host_devices, plans
    from simulator.tracing import lowering
    from simulator.model.errors import InputError
    from simulator.grouping.group import group
    from simulator.tracing.importer import trace_import
    from placeto.cli.calibrate import add_calibrate_arguments, run_calibrate
    from placeto.cli.eval import add_eval_arguments, run_eval
    import argparse

    TX = optax.adam(1e-2)

    def mlp_args():
        k = jax.random.split(jax.random.key(0), 4)
        params = {"w1": jax.random.normal(k[0], (8, 16)), "w2": jax.random.normal(k[1], (16, 16)),
                  "w3": jax.random.normal(k[2], (16, 4))}
        return params, TX.init(params), jax.random.normal(k[3], (4, 8))

    def mlp_step(p, s, x):
        def loss(q):
            h = jnp.tanh(x @ q["w1"])
            h = jnp.tanh(h @ q["w2"]) + h
            return jnp.mean((h @ q["w3"]) ** 2)
        value, grads = jax.value_and_grad(loss)(p)
        updates, s = TX.update(grads, s, p)
        return optax.apply_updates(p, updates), s, value

    tmp, ROOT = sys.argv[1], sys.argv[2]
    report = {"n_devices": len(jax.devices()), "flags": __import__("os").environ["XLA_FLAGS"]}
    args = mlp_args()
    reference = jax.jit(mlp_step)(*args)
    traced = trace_import("__main__:mlp_step", "__main__:mlp_args", name="mlp")
    values = lowering.leaf_values(traced, args)
    devices = host_devices.local_devices(2)
    grouping = group(traced.graph, 12)
    rng = np.random.default_rng(0)
    report["runs"] = []
    for what, op_to_group in (("ops", None), ("groups", grouping.op_to_group)):
        n_units = traced.graph.n_nodes if op_to_group is None else grouping.graph.n_nodes
        for threads, stages in ((True, False), (False, False), (None, True), (True, True)):
            placement = rng.integers(0, 2, n_units)
            plan = plans.program_plan(traced, values, placement, devices, op_to_group, stages=stages)
            for step in range(2):  # the second step reuses the resident values: none may have been donated
                flat, env = hw.run_plan(plan, threads=threads)
            out = jax.tree_util.tree_unflatten(plan.out_tree, flat)
            pairs = list(zip(jax.tree.leaves(out), jax.tree.leaves(reference)))
            err = max(float(jnp.max(jnp.abs(a - b))) for a, b in pairs)
            close = all(bool(np.allclose(a, b, rtol=1e-5, atol=1e-6)) for a, b in pairs)
            kept = [(t, env[(s, t.device)]) for t in plan.tasks if t.fn is not None for s in t.outputs
                    if (s, t.device) in env]  # (a stage's transient outputs may have been donated since)
            wrong = sum(x.devices() != {devices[t.device]} for t, x in kept)
            used = sorted({d.id for _, x in kept for d in x.devices()})
            report["runs"].append({"units": what, "threads": threads, "stages": stages, "n_units": n_units,
                                   "max_abs_err": err, "allclose": close, "misplaced": wrong, "devices_used": used,
                                   "transfers": sum(len(v) for t in plan.tasks for _, v in t.sends),
                                   "dispatches": sum(t.fn is not None for t in plan.tasks),
                                   "donated": sum(len(t.donated) for t in plan.tasks),
                                   "computing_units": sum(u.body is not None for u in
                                                          lowering.unit_programs(traced, op_to_group))})
    # staged, all on one device: a single stage whose outputs equal the plain step's, twice in a row
    one = plans.program_plan(traced, values, np.zeros(traced.graph.n_nodes, int), devices, None, stages=True)
    for step in range(2):
        out = hw.run_outputs(one)
    report["one_stage"] = {"dispatches": sum(t.fn is not None for t in one.tasks),
                           "allclose": all(bool(np.allclose(a, b, rtol=1e-5, atol=1e-6))
                                           for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(reference)))}
    try:
        from simulator.measure.calibrate import profile_plan
        profile_plan(one)
        report["one_stage"]["profile"] = None
    except InputError as e:
        report["one_stage"]["profile"] = str(e)

    errors = {}
    def expect_error(name, fn):
        try:
            fn()
            errors[name] = None
        except InputError as e:
            errors[name] = str(e)
    expect_error("too_many_devices", lambda: host_devices.local_devices(3))
    expect_error("no_gpu", lambda: host_devices.local_devices("gpu:0,cpu:0"))
    expect_error("cpu_index", lambda: host_devices.local_devices((("cpu", 0), ("cpu", 2))))
    report["listed"] = [d.id for d in host_devices.local_devices("cpu:1,cpu:0")]
    expect_error("ensure_too_many", lambda: host_devices.ensure_host_devices(3))
    expect_error("wrong_length", lambda: plans.program_plan(traced, values, np.zeros(5, int), devices))
    expect_error("bad_device", lambda: plans.program_plan(traced, values, np.full(traced.graph.n_nodes, 2), devices))
    report["errors"] = errors

    # the command line: calibrate, then eval --hardware on an imported grouped graph
    # the graph's meta names the program, but only --program (the user) makes eval import it
    meta = {**traced.graph.meta, "source": {"function": "__main__:mlp_step", "args_spec": "__main__:mlp_args"},
            "grouping": {"target_groups": 12, "op_to_group": grouping.op_to_group.tolist()}}
    import dataclasses
    gpath = f"{tmp}/mlp.json"
    save_graph(dataclasses.replace(grouping.graph, name="mlp", meta=meta), gpath)
    n = grouping.graph.n_nodes
    save_placement(f"{tmp}/one.json", np.zeros(n, int), ["/cpu:0", "/cpu:1"])
    save_placement(f"{tmp}/rr.json", np.arange(n) % 2, ["/cpu:0", "/cpu:1"])
    save_placement(f"{tmp}/short.json", np.zeros(n - 1, int), ["/cpu:0", "/cpu:1"])
    def cli(add, run, argv):
        p = argparse.ArgumentParser()
        add(p)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                code = run(p.parse_args(argv))
            except InputError as e:
                return "error", str(e)
        return code, out.getvalue()
    t0 = time.perf_counter()
    report["calibrate"] = cli(add_calibrate_arguments, run_calibrate,
                              ["--devices", "2", "--out", f"{tmp}/cluster.json", "--repeats", "3"])
    report["calibrate_s"] = time.perf_counter() - t0
    report["eval"] = cli(add_eval_arguments, run_eval,
                         [gpath, "--placement", f"{tmp}/one.json", f"{tmp}/rr.json", "--hardware", "--costs",
                          "units", "--cluster", f"{tmp}/cluster.json", "--repeats", "3", "--plot",
                          f"{tmp}/plot.png", "--json", f"{tmp}/rows.json", "--program", "__main__:mlp_step",
                          "--args-spec", "__main__:mlp_args"])
    rng = np.random.default_rng(0)
    for k in range(4):
        save_placement(f"{tmp}/r{k}.json", rng.integers(0, 2, n), ["/cpu:0", "/cpu:1"])
    # the main eval above runs on the default rig (a worker process per device); the rest on the threads rig,
    # whose starts cost no worker processes, so the suite stays short
    report["refit"] = cli(add_eval_arguments, run_eval,
                          [gpath, "--placement", f"{tmp}/one.json", f"{tmp}/rr.json"]
                          + [f"{tmp}/r{k}.json" for k in range(4)]
                          + ["--hardware", "--rig", "threads", "--cluster", f"{tmp}/cluster.json", "--repeats", "3",
                             "--refit",
                             f"{tmp}/refit.json", "--program", "__main__:mlp_step", "--args-spec",
                             "__main__:mlp_args"])
    report["eval_short"] = cli(add_eval_arguments, run_eval,
                               [gpath, "--placement", f"{tmp}/short.json", "--hardware", "--cluster",
                                f"{tmp}/cluster.json"])
    report["eval_3dev"] = cli(add_eval_arguments, run_eval,
                              [gpath, "--placement", f"{tmp}/one.json", "--hardware", "--devices", "3"])

    # a zoo program (a small nmt family graph): staged plans on 1 and 2 devices equal jax.jit(step); then
    # `placeto eval --hardware --devices cpu:1,cpu:0` on it (devices listed out of order)
    from placeto.cli.main import main as placeto_main
    from simulator.hardware.runner import staged_order
    from simulator.tracing.program import program_of
    from simulator.workloads.zoo.registry import build_program_from_data
    from simulator import load_graph
    zoo_path = f"{ROOT}/datasets/nmt/nmt_002.json.gz"
    zoo = load_graph(zoo_path)
    ztraced, zgroups, zargs = program_of(zoo)
    built = build_program_from_data(zoo.meta["program"]["kind"], zoo.meta["program"]["kwargs"])
    zref = jax.tree.leaves(jax.jit(built.step)(built.params, built.opt_state, built.batch))
    zvalues = lowering.leaf_values(ztraced, zargs)
    rr = (np.arange(zoo.n_nodes) * 6 // zoo.n_nodes % 2).astype(np.int32)  # 6 blocks: few stages to compile
    report["zoo"] = {}
    for name, placement, order in (("one", np.zeros(zoo.n_nodes, np.int32), zoo.topo_order),
                                   ("rr", rr, staged_order(zoo, rr, zoo.topo_order))):
        plan = plans.program_plan(ztraced, zvalues, placement, devices, zgroups, order, stages=True)
        for step in range(2):
            got = jax.tree.leaves(hw.run_outputs(plan))
        report["zoo"][name] = {"allclose": len(got) == len(zref) and all(
            bool(np.allclose(a, b, rtol=1e-4, atol=1e-5)) for a, b in zip(got, zref)),
            "dispatches": sum(t.fn is not None for t in plan.tasks)}
    save_placement(f"{tmp}/zoo_one.json", np.zeros(zoo.n_nodes, int), ["/cpu:0", "/cpu:1"])
    save_placement(f"{tmp}/zoo_rr.json", rr, ["/cpu:0", "/cpu:1"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = placeto_main(["eval", zoo_path, "--placement", f"{tmp}/zoo_one.json", f"{tmp}/zoo_rr.json",
                             "--hardware", "--rig", "threads", "--devices", "cpu:1,cpu:0", "--cluster",
                             f"{tmp}/cluster.json",
                             "--costs", "graph", "--repeats", "2", "--warmup", "1"])
    report["zoo_eval"] = [code, out.getvalue()]
    print(json.dumps(report))
''')


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The functional checks (outputs, errors, command lines): nothing timed is asserted, so they run beside
    other tests."""
    tmp = tmp_path_factory.mktemp("hardware")
    return {**run_script(SCRIPT, str(tmp), str(ROOT)), "tmp": tmp}


def test_subprocess_has_two_serial_host_devices(report):
    assert report["n_devices"] == 2
    assert all(f in report["flags"].split() for f in SERIAL_CPU_FLAGS)


def test_placed_run_matches_unplaced_program(report):
    assert {(r["units"], r["threads"], r["stages"]) for r in report["runs"]} == {
        (u, t, s) for u in ("ops", "groups") for t, s in ((True, False), (False, False), (None, True), (True, True))}
    for run in report["runs"]:
        assert run["allclose"], run  # rtol 1e-5, atol 1e-6: only fusion boundaries differ from the one-jit step


def test_staged_plans_dispatch_once_per_run_of_a_device_and_equal_the_plain_step(report):
    """stages=True: each device's consecutive units are one jitted stage (fewer dispatches than units, transient
    inputs donated), outputs as the plain jitted step's, step after step; all on one device: one dispatch."""
    for run in report["runs"]:
        if run["stages"]:
            assert run["dispatches"] < run["computing_units"], run
        else:
            assert run["dispatches"] == run["computing_units"] and run["donated"] == 0, run
    assert any(run["donated"] > 0 for run in report["runs"] if run["stages"])
    one = report["one_stage"]
    assert one["dispatches"] == 1 and one["allclose"], one
    assert "stages=False" in one["profile"]


def test_placed_run_uses_both_devices(report):
    for run in report["runs"]:
        assert run["misplaced"] == 0, run  # every intermediate sits on its unit's device
        assert run["devices_used"] == [0, 1] and run["transfers"] > 0, run


def test_bad_inputs_are_clear_errors(report):
    errors = report["errors"]
    assert "3 devices requested but JAX has 2" in errors["too_many_devices"]
    assert "3 devices requested" in errors["ensure_too_many"]
    assert "placement has 5 entries" in errors["wrong_length"]
    assert "uses device 2 but 2 devices" in errors["bad_device"]
    assert report["eval_short"][0] == "error" and "entries but graph 'mlp'" in report["eval_short"][1]
    assert report["eval_3dev"][0] == "error"  # the 2-device placement file disagrees before JAX is asked
    assert "--devices 3 but placement" in report["eval_3dev"][1] and "has 2 devices" in report["eval_3dev"][1]
    assert "no 'gpu' backend" in errors["no_gpu"] and "gpu:0" in errors["no_gpu"]
    assert "cpu:2: JAX has 2 cpu device(s)" in errors["cpu_index"]


def test_staged_zoo_program_equals_its_jitted_step_and_evals_on_a_device_list(report):
    """nmt_002 (115 groups): staged on one device (one dispatch) and in 6 blocks alternating over two (stages in
    staged_order), the outputs of two steps in a row equal jax.jit(step)'s; `placeto eval --hardware --devices
    cpu:1,cpu:0` measures both placements on those devices, in that order."""
    zoo = report["zoo"]
    assert zoo["one"] == {"allclose": True, "dispatches": 1}, zoo
    assert zoo["rr"]["allclose"] and 1 < zoo["rr"]["dispatches"] < 115, zoo
    assert report["listed"] == [1, 0]
    code, text = report["zoo_eval"]
    assert code == 0, text
    assert "hardware: cpu:1, cpu:0" in text and "zoo_one.json" in text and "zoo_rr.json" in text, text


def test_calibrate_and_eval_command_lines(report):
    code, text = report["calibrate"]
    assert code == 0 and "delta1" in text, text
    assert "R^2" in text and "hops-4KB" in text and "chains-2dev" in text, text  # the fit, probe by probe
    cluster = json.loads((report["tmp"] / "cluster.json").read_text())
    assert cluster["format"] == "placeto-cluster" and len(cluster["devices"]) == 2
    assert {d["kind"] for d in cluster["devices"]} == {"local-cpu"}
    assert cluster["delta1_us"] >= 0 and cluster["delta2_us"] >= 0 and cluster["bandwidth_bytes_per_us"] > 0
    assert [h["name"] for h in cluster["hosts"]] == ["host"] and {d["host"] for d in cluster["devices"]} == {"host"}
    code, text = report["eval"]
    assert code == 0, text
    assert "one.json" in text and "rr.json" in text and "median |error|" in text
    assert "Spearman n/a (n=2: needs >= 5 placements)" in text and "nan" not in text, text
    assert "error = (simulated - measured) / measured median step time" in text, text
    assert "devices: 2 host CPU devices sharing" in text and "the simulator assumes 2x" in text, text
    assert "fastest measured: rr.json" in text or "measured SLOWER than the single device (one.json" in text, text
    rows = json.loads((report["tmp"] / "rows.json").read_text())
    assert [r["placement"].rsplit("/", 1)[-1] for r in rows["rows"]] == ["one.json", "rr.json"]
    assert all(r["measured"]["median_us"] > 0 and r["simulated_us"] > 0 for r in rows["rows"])
    assert (report["tmp"] / "plot.png").stat().st_size > 1000


def test_eval_refit_writes_a_cluster_fitted_to_the_measured_placements(report):
    """eval --refit: the per-op and per-transfer costs refitted to six measured placements, the cluster written,
    the fit placement by placement and the leave-one-out agreement printed."""
    code, text = report["refit"]
    assert code == 0, text
    assert "refitting the cluster to the 6 measured placements" in text and "r3.json" in text and "R^2" in text
    assert "held out (each placement simulated with the fit on the others): median |error|" in text
    assert "over 6 placements; Spearman" in text and "(n=6)" in text and "nan" not in text, text
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("placement ") and "residual" in line)
    header, row = lines[at], next(line for line in lines[at:] if line.startswith("r3.json"))
    assert row.index("%") == header.index("residual") + len("residual") - 1, text  # the refit table's columns
    refitted = load_cluster(report["tmp"] / "refit.json")
    calibrated = load_cluster(report["tmp"] / "cluster.json")
    assert refitted.n_devices == 2
    assert refitted.bandwidth_bytes_per_us == pytest.approx(calibrated.bandwidth_bytes_per_us, rel=1e-9)
