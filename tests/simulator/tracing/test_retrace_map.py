"""Grouped graph files outlive a JAX version: a re-trace whose ops differ from the file's maps onto its groups.

A changed trace is simulated by a step that scales every parameter by 1.0 first (one extra `mul` per leaf, as a
JAX version that adds a cast would): built one way, re-traced the other.
"""

import dataclasses
import json

import jax
import numpy as np
import pytest

import simulator.tracing.program as retracing
import simulator.workloads.zoo
from placeto.cli.main import main
from simulator.tracing.program import retrace
from simulator.workloads.families import GraphSpec, build_graph
from simulator.model.errors import InputError
from simulator.model.graph import make_graph
from simulator.model.io import load_graph, save_graph
from simulator.model.placement_file import save_placement
from simulator.tracing.retrace_map import make_monotone, op_keys, quotient_acyclic, scope

SPEC = GraphSpec("tiny_rnnlm", "rnnlm", {"seed": 0, "layers": 1, "steps": 2, "batch": 4, "hidden": 8,
                                         "vocab": 16}, target_groups=12)
BUILD = simulator.workloads.zoo.build_program


def perturbed_build(kind, **kwargs):
    """The zoo's program whose step first multiplies every parameter by 1.0 (extra ops, same function)."""
    program = BUILD(kind, **kwargs)

    def step(params, opt_state, batch):
        return program.step(jax.tree.map(lambda x: x * 1.0, params), opt_state, batch)

    return dataclasses.replace(program, step=step)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """{"plain", "perturbed"}: paths of the tiny graph built from the plain and the perturbed step."""
    root = tmp_path_factory.mktemp("retrace")
    out = {"plain": root / "plain.json.gz", "perturbed": root / "perturbed.json.gz"}
    save_graph(build_graph(SPEC, "ptb")[0], out["plain"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(simulator.workloads.zoo, "build_program", perturbed_build)
        save_graph(build_graph(SPEC, "ptb")[0], out["perturbed"])
    return out


@pytest.fixture
def notes(monkeypatch):
    got = []
    monkeypatch.setattr(retracing, "RETRACE_NOTES", got.append)
    return got


def check_mapping(graph, traced, op_to_group):
    assert op_to_group.shape == (traced.graph.n_nodes,)
    assert op_to_group.min() >= 0 and op_to_group.max() < graph.n_nodes
    assert quotient_acyclic(traced.graph, op_to_group, graph.n_nodes)


def test_file_records_op_keys(files):
    graph = load_graph(files["plain"])
    keys = graph.meta["grouping"]["op_keys"]
    assert len(keys) == len(graph.meta["grouping"]["op_to_group"]) == graph.meta["ops"]
    assert graph.meta["grouping"]["jax_version"] == jax.__version__
    assert keys[0].startswith("param|") and any(k.startswith("dot_general|b|RNNLM/") for k in keys)
    assert scope("transpose(jvp(RNNLM))/lstm_0/gates") == "RNNLM/lstm_0/gates"


def test_same_trace_keeps_the_file_grouping(files, notes):
    graph = load_graph(files["plain"])
    traced, op_to_group = retrace(graph)
    assert op_to_group.tolist() == graph.meta["grouping"]["op_to_group"] and not notes
    assert "retrace_note" not in traced.graph.meta


@pytest.mark.parametrize("built, traced_with", [("plain", "perturbed"), ("perturbed", "plain")])
def test_changed_trace_is_mapped_by_key(files, notes, monkeypatch, built, traced_with):
    graph = load_graph(files[built])
    if traced_with == "perturbed":
        monkeypatch.setattr(simulator.workloads.zoo, "build_program", perturbed_build)
    traced, op_to_group = retrace(graph)
    check_mapping(graph, traced, op_to_group)
    n_file = len(graph.meta["grouping"]["op_to_group"])
    assert traced.graph.n_nodes != n_file
    assert len(notes) == 1 and "\n" not in notes[0] and traced.graph.meta["retrace_note"] == notes[0]
    assert f"{traced.graph.n_nodes} ops vs {n_file} in the file" in notes[0] and "matched by key" in notes[0]
    exact = int(notes[0].split("; ")[1].split(" matched by key")[0])
    assert exact >= min(n_file, traced.graph.n_nodes) - 2  # every op both traces share keeps its key


def test_old_file_without_op_keys_is_regrouped_never_mapped_by_position(files, notes, monkeypatch, tmp_path):
    graph = load_graph(files["plain"])
    grouping = {k: v for k, v in graph.meta["grouping"].items() if k not in ("op_keys", "jax_version")}
    old = dataclasses.replace(graph, meta={**graph.meta, "grouping": grouping})
    assert retrace(old)[1].tolist() == grouping["op_to_group"] and not notes  # same trace: unchanged
    monkeypatch.setattr(simulator.workloads.zoo, "build_program", perturbed_build)
    traced, op_to_group = retrace(old)
    check_mapping(old, traced, op_to_group)
    assert len(notes) == 1 and "the file has no op keys: regrouped by the file's rules" in notes[0]
    assert "an unknown JAX" in notes[0] and "position" not in notes[0]
    from simulator.grouping.group import group
    assert op_to_group.tolist() == group(traced.graph, grouping["target_groups"]).op_to_group.tolist()
    no_rules = dataclasses.replace(old, meta={**old.meta, "grouping": {**grouping, "target_groups": None}})
    with pytest.raises(InputError, match=r"rebuild the graph under this JAX") as err:  # refused, not guessed
        retrace(no_rules)
    assert "\n" not in str(err.value)


def test_monotone_repair_breaks_a_cycle():
    # ops a -> b -> c; the file's groups 0 -> 1; a and c in group 0, b in group 1: groups 0 <-> 1 form a cycle
    nodes = [{"name": n, "op": "add", "out_bytes": [4]} for n in "abc"]
    ops = make_graph("ops", nodes, [(0, 1, 0), (1, 2, 0)])
    grouped = make_graph("groups", nodes[:2], [(0, 1, 0)])
    group = np.array([0, 1, 0])
    assert not quotient_acyclic(ops, group, 2)
    rank = np.array([0, 1])
    assert make_monotone(ops, group, rank) == 1 and group.tolist() == [0, 1, 1]
    assert quotient_acyclic(ops, group, grouped.n_nodes)


def test_unmappable_trace_regroups_or_fails_in_one_line(files, notes, monkeypatch):
    graph = load_graph(files["plain"])
    grouping = dict(graph.meta["grouping"])
    grouping["op_keys"] = [f"other|f|X{i}|1:float32" for i in range(len(grouping["op_to_group"]))]
    monkeypatch.setattr(simulator.workloads.zoo, "build_program", perturbed_build)
    unknown = dataclasses.replace(graph, meta={**graph.meta, "grouping": grouping})
    traced, op_to_group = retrace(unknown)  # nothing matches by key: regrouped with the file's rules
    check_mapping(graph, traced, op_to_group)
    assert "regrouped by the file's rules" in notes[-1]
    no_target = dataclasses.replace(graph, meta={**graph.meta, "grouping": {**grouping, "target_groups": None}})
    with pytest.raises(InputError, match=r"placeto datasets build --only tiny_rnnlm") as err:
        retrace(no_target)
    assert "\n" not in str(err.value)


def test_bad_op_keys_field_is_one_line_error(files):
    graph = load_graph(files["plain"])
    bad = dataclasses.replace(graph, meta={**graph.meta, "grouping": {**graph.meta["grouping"], "op_keys": [1]}})
    with pytest.raises(InputError, match="meta.grouping.op_keys"):
        retrace(bad)


def test_profile_and_hardware_eval_of_a_changed_trace(files, monkeypatch, tmp_path, capsys):
    graph_file = tmp_path / "g.json.gz"
    graph_file.write_bytes(files["plain"].read_bytes())
    placement = tmp_path / "single.json"
    save_placement(placement, np.zeros(load_graph(graph_file).n_nodes, dtype=np.int32), ["/gpu:0"])
    monkeypatch.setattr(simulator.workloads.zoo, "build_program", perturbed_build)
    assert main(["profile", str(graph_file), "--repeats", "1", "--warmup", "0"]) == 0
    assert "re-traced under jax" in capsys.readouterr().err
    assert "local-cpu" in load_graph(graph_file).costs
    report = tmp_path / "eval.json"
    assert main(["eval", str(graph_file), "--placement", str(placement), "--hardware", "--devices", "1",
                 "--costs", "graph", "--repeats", "1", "--warmup", "0", "--json", str(report)]) == 0
    assert "re-traced under jax" in capsys.readouterr().err
    assert json.loads(report.read_text())



def _dataflow(units):
    """{(producer unit, consumer unit)} of a program's units, read off their inputs and outputs."""
    from simulator.model.graph import Source

    made = {Source(i, 0): u for u, unit in enumerate(units) for i in unit.values}
    made.update((s, u) for u, unit in enumerate(units) for s in unit.outputs)
    return {(made[s], v) for v, unit in enumerate(units) for s in unit.inputs if s in made and made[s] != v}


def _one_group_emptied(real_retrace):
    """`retrace` as under a JAX whose mapping left a group empty: the first group with inputs whose ops can join
    the next group without a cycle joins it (as retrace_map's monotone repair moves ops)."""

    def changed(graph, program=None, args_spec=None):
        traced, op_to_group = real_retrace(graph, program, args_spec)
        g = np.asarray(op_to_group)
        for k in sorted(set(graph.edge_dst.tolist())):
            trial = np.where(g == k, k + 1, g).astype(np.int32)
            if k + 1 < graph.n_nodes and quotient_acyclic(traced.graph, trial, graph.n_nodes):
                meta = {**traced.graph.meta, "retrace_note": f"test: group {k} emptied"}
                return dataclasses.replace(traced, graph=dataclasses.replace(traced.graph, meta=meta)), trial
        raise AssertionError("no group could be emptied")

    return changed


def test_runner_of_a_changed_trace_simulates_the_units_it_runs(files, monkeypatch):
    """A re-trace mapped onto the file's groups runs units whose dataflow is not the file's edges (ops moved, groups
    emptied): the runner simulates the units' own (simulator.tracing.lowering.unit_graph), so the staged simulation of its
    dispatch order has no cycle at 4 devices (it had, with the emptied group's stage first and the file's edges
    into it: jax 0.11.2 on files built under 0.10.2)."""
    from simulator.hardware.runner import hardware_runner
    from simulator.model.cluster import Cluster, Device
    from simulator.tracing.lowering import unit_programs
    from simulator.engine.staged import RigCosts, simulate_staged

    monkeypatch.setattr(retracing, "retrace", _one_group_emptied(retracing.retrace))
    graph = load_graph(files["plain"]).with_costs("cpu", np.ones(load_graph(files["plain"]).n_nodes))
    traced, op_to_group = retracing.retrace(graph)
    units = unit_programs(traced, op_to_group, graph.n_nodes)
    assert _dataflow(units) != set(zip(graph.edge_src.tolist(), graph.edge_dst.tolist()))
    one, cluster = (Cluster("rig", tuple(Device(f"cpu:{d}", "cpu", 1e12) for d in range(n)), 5.0, 5.0, 1e4)
                    for n in (1, 4))
    runner = hardware_runner(graph, one, mode="program", devices=1, rig="threads")  # the tests' JAX has 1 device
    runner = dataclasses.replace(runner, cluster=cluster)  # its dispatch order at 4
    g = runner.graph
    assert set(zip(g.edge_src.tolist(), g.edge_dst.tolist())) == _dataflow(units)
    empty = [u for u, unit in enumerate(units) if unit.body is None and not unit.values]
    assert empty and all(g.cost_for("cpu")[u] == 0 for u in empty)
    costs = RigCosts(launch_us=30.0, step_us=100.0, send_us=20.0, recv_us=5.0, latency_us=40.0)
    for placement in [np.zeros(g.n_nodes, np.int32)] + [np.random.default_rng(s).integers(0, 4, g.n_nodes)
                                                        for s in range(3)]:
        placement = placement.astype(np.int32)
        assert simulate_staged(g, placement, cluster, runner.order(placement), costs, runner.holders).runtime_us > 0
