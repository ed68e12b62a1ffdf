"""Families and benchmarks: deterministic specs and splits, expert placements, and the shipped data itself."""

import dataclasses
import gzip

import numpy as np
import pytest

from simulator.workloads.families import (ALL_FAMILIES, DATASETS, DEVICE_COUNTS, FAMILIES, N_GRAPHS, N_TEST, NEW_FAMILIES,
                              benchmark_specs, build_graph, expert_op_placement, family_specs, load_family,
                              load_manifest, split_of)
from simulator import cluster_preset, load_graph, simulate
from simulator.model.errors import InputError
from simulator.model.io import dumps_graph
from simulator.model.stats import graph_stats

ALL = (*ALL_FAMILIES, "benchmarks")


def test_specs_and_splits_are_deterministic():
    for family in ALL_FAMILIES:
        a, b = family_specs(family, 0), family_specs(family, 0)
        assert a == b and len(a) == N_GRAPHS
        assert family_specs(family, 1) != a
        split = split_of(family, 0)
        assert split == split_of(family, 0) and split.count("test") == N_TEST


def test_placeto_families_keep_their_seeds():
    """FAMILIES is Placeto's three, first in ALL_FAMILIES, so their specs and splits (seeded by the index) are the
    shipped ones; the new families' kwargs are what a graph file may name (check_program_args)."""
    from simulator.workloads.zoo.registry import check_program_args

    assert ALL_FAMILIES[:3] == FAMILIES == ("cifar10", "ptb", "nmt") and set(NEW_FAMILIES).isdisjoint(FAMILIES)
    for family in ALL_FAMILIES:
        shipped = load_manifest(family)["graphs"]
        assert [e["program"]["kwargs"] for e in shipped] == [s.kwargs for s in family_specs(family, 0)]
        assert [e["split"] for e in shipped] == split_of(family, 0)
    for family in NEW_FAMILIES:
        for spec in family_specs(family, 0):
            check_program_args(spec.kind, spec.kwargs)
    with pytest.raises(InputError, match="known: cifar10, ptb, nmt, transformer, mlp, matmul, moe, cnn"):
        family_specs("resnet")


@pytest.mark.parametrize("family", NEW_FAMILIES)
def test_new_family_program_is_a_training_step(family):
    """A tiny config of each new family's program: one jitted step gives a finite loss and updates every
    parameter, and tracing it twice writes the same graph."""
    import jax

    from simulator.workloads.families import trace_spec, GraphSpec
    from simulator.workloads.zoo.registry import CONFIGS

    tiny = dataclasses.asdict(CONFIGS[family].tiny())
    kwargs = {"seed": 3, **{k: v for k, v in tiny.items() if type(v) in (int, float, bool)}}
    program, traced = trace_spec(GraphSpec("t", family, kwargs, 0))
    assert list(program.params) == program.meta["layers"] and program.meta["family"] == family
    args = (program.params, program.opt_state, program.batch)
    new_params, _, loss = jax.jit(program.step).lower(*args).compile(
        compiler_options={"xla_backend_optimization_level": 0})(*args)
    assert np.isfinite(float(loss))
    assert all(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(program.params), jax.tree.leaves(new_params)))
    again = trace_spec(GraphSpec("t", family, kwargs, 0))[1]
    assert 50 < traced.graph.n_nodes < 2000 and dumps_graph(again.graph) == dumps_graph(traced.graph)


def test_write_readme_keeps_the_text_below_its_marker(tmp_path):
    """write_readme rewrites the head and tables and keeps what follows README_END, or, in a README from before
    the marker, what follows the statistics table; writing twice gives the same file."""
    from simulator.workloads.families import README_END, write_readme

    readme = tmp_path / "README.md"
    table = "| family | graphs |\n|---|--:|\n| nmt | 32 |\n"
    readme.write_text(f"# Datasets\n\nold text\n\n{table}\n## Generated\n\nmine\n")
    write_readme(tmp_path)
    first = readme.read_text()
    assert "old text" not in first and first.endswith(f"{README_END}\n\n## Generated\n\nmine\n")
    readme.write_text(first + "more\n")
    write_readme(tmp_path)
    assert readme.read_text() == first + "more\n"
    write_readme(tmp_path)
    assert readme.read_text() == first + "more\n"


def test_expert_placement_puts_layers_on_successive_devices():
    from simulator.workloads.families import trace_spec, GraphSpec

    spec = GraphSpec("t", "nmt", {"seed": 0, "layers": 4, "src_len": 2, "tgt_len": 2, "batch": 2, "hidden": 8,
                                  "vocab": 16}, 0)
    program, traced = trace_spec(spec)
    groups = program.meta["layer_groups"]
    for d in (2, 4):
        p = expert_op_placement(traced.graph, groups, d)
        assert set(np.unique(p)) == set(range(d))
        for i, name in enumerate(traced.graph.names):
            stack = traced.graph.attrs[i].get("name_stack", "")
            if "encoder_lstm_0" in stack:
                assert p[i] == 0
            if "softmax" in stack.split("/"):
                assert p[i] == d - 1


def strip_measured(graph):
    """The graph as `datasets build` writes it before `placeto profile` adds measured kinds."""
    measured = graph.meta.get("profile", {})
    costs = {k: v for k, v in graph.costs.items() if k not in measured}
    meta = {k: v for k, v in graph.meta.items() if k != "profile"}
    return dataclasses.replace(graph, costs=costs, meta=meta)


@pytest.mark.parametrize("family", ALL)
def test_shipped_graphs_validate_simulate_and_have_k80_costs(family):
    manifest = load_manifest(family)
    graphs = load_family(family, split=None)
    assert len(graphs) == len(manifest["graphs"]) == (N_GRAPHS if family != "benchmarks" else len(benchmark_specs()))
    for entry, graph in zip(manifest["graphs"], graphs):
        assert graph.cost_for("k80").shape == (graph.n_nodes,)
        stats = graph_stats(graph, "k80", DEVICE_COUNTS)
        assert entry["groups"] == graph.n_nodes and entry["edges"] == graph.n_edges
        assert entry["lower_bound_us"]["4"] == pytest.approx(stats.lower_bound_us[4], abs=1e-3)
        result = simulate(graph, np.zeros(graph.n_nodes, dtype=np.int32), cluster_preset("placeto-k80", 2))
        assert np.isfinite(result.runtime) and result.runtime >= stats.total_compute_us
        assert 80 <= graph.n_nodes <= 2000, graph.name
    if family != "benchmarks":
        assert sum(e["split"] == "train" for e in manifest["graphs"]) == N_GRAPHS - N_TEST


def test_measured_costs_where_promised():
    for family in FAMILIES:
        profiled = [g for g in load_family(family, split=None) if "local-cpu" in g.costs]
        assert len(profiled) >= 2, family
    for graph in load_family("benchmarks", split=None):
        assert "local-cpu" in graph.costs, graph.name
        assert np.all(graph.cost_for("local-cpu") >= 0) and graph.cost_for("local-cpu").sum() > 0
        for d in DEVICE_COUNTS:
            expert = np.asarray(graph.meta["expert_placement"][str(d)])
            assert expert.shape == (graph.n_nodes,) and expert.max() < d


def smallest(family):
    entries = load_manifest(family)["graphs"]
    return min(entries, key=lambda e: e["ops"])


@pytest.mark.parametrize("family", ALL)
def test_rebuild_reproduces_shipped_graph(family):
    """Rebuild the smallest shipped graph of each family from its spec: identical text, byte-identical gzip."""
    entry = smallest(family)
    specs = benchmark_specs() if family == "benchmarks" else family_specs(family, load_manifest(family)["seed"])
    spec = next(s for s in specs if s.name == entry["name"])
    rebuilt, _ = build_graph(spec, family)
    shipped = load_graph(DATASETS / family / entry["file"])
    if "op_keys" not in shipped.meta["grouping"]:  # shipped before op keys (until the next rebuild): compare the rest
        grouping = {k: v for k, v in rebuilt.meta["grouping"].items() if k not in ("op_keys", "jax_version")}
        rebuilt = dataclasses.replace(rebuilt, meta={**rebuilt.meta, "grouping": grouping})
    assert dumps_graph(rebuilt) == dumps_graph(strip_measured(shipped))
    if "profile" not in shipped.meta:
        data = gzip.compress(dumps_graph(rebuilt).encode(), compresslevel=9, mtime=0)
        assert data == (DATASETS / family / entry["file"]).read_bytes()


def test_seed_graphs_loads_built_seeds_renamed_and_does_not_rebuild(tmp_path, monkeypatch):
    """seed_graphs: a seed's family already under the root is loaded (both splits), not rebuilt, and its graphs are
    named s<seed>_<name>; seed 0 (the shipped family, whose test split is held out) is refused."""
    import json

    from simulator.workloads import families
    from simulator.model.errors import InputError
    from simulator.model.generate import layered_dag
    from simulator.model.io import save_graph

    folder = tmp_path / "s3" / "ptb"
    folder.mkdir(parents=True)
    originals = [layered_dag(10 + i, seed=i) for i in range(2)]
    for i, g in enumerate(originals):
        save_graph(g, folder / f"ptb_{i:03d}.json.gz")
    (folder / "manifest.json").write_text(json.dumps(
        {"family": "ptb", "seed": 3, "graphs": [{"file": f"ptb_{i:03d}.json.gz", "split": s}
                                                for i, s in enumerate(["train", "test"])]}))
    monkeypatch.setattr(families, "build", lambda *a, **k: pytest.fail("rebuilt a family that is there"))
    graphs = families.seed_graphs("ptb", [3], tmp_path)
    assert [g.name for g in graphs] == [f"s3_{g.name}" for g in originals]
    assert [g.n_nodes for g in graphs] == [10, 11]
    with pytest.raises(InputError, match="seed 0"):
        families.seed_graphs("ptb", [0], tmp_path)
