"""Every preset's device kind, on every graph that can be costed: `import-jax` writes every analytic kind, and a
traced graph without a kind gets its analytic costs on demand (Graph.cost_for, cached on the graph object, never
written to its file); a graph without op descriptions says in one line which kinds it has and how to get the one
missing."""

import json

import numpy as np
import pytest

from placeto.cli.main import main
from simulator.workloads.families import ANALYTIC_KINDS, COST_KINDS, DATASETS
from simulator import InputError, cluster_preset, load_graph, save_graph, save_placement, simulate
from simulator.model.cluster import PRESETS
from simulator.model.costs import SPECS, annotate_costs
from simulator.model.generate import layered_dag
from simulator.tracing.importer import import_step
from simulator.model.io import dumps_graph
from simulator.engine.reference import simulate_reference
from simulator.model.scaling import scale_units

NEW_KINDS = ("h100-pcie", "h200-nvlink")  # presets whose kinds (h100-pcie, h200) import-jax did not write
STEP = '''
import jax, jax.numpy as jnp

def step(params, x, y):
    def loss(p):
        return jnp.mean((jnp.tanh(x @ p["w1"]) @ p["w2"] - y) ** 2)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, jax.grad(loss)(params))
'''
ARGS = json.dumps([{"w1": {"shape": [64, 128]}, "w2": {"shape": [128, 16]}}, {"shape": [32, 64]},
                   {"shape": [32, 16]}])


@pytest.fixture(scope="module")
def user_folder(tmp_path_factory):
    """A folder holding a user's step module, user_mlp.py (not on sys.path: import-jax runs in it, as a user's)."""
    folder = tmp_path_factory.mktemp("user")
    (folder / "user_mlp.py").write_text(STEP)
    return folder


def _old_import(folder, monkeypatch):
    """An op graph and a grouped graph as `import-jax` wrote them before every kind: ANALYTIC_KINDS only."""
    monkeypatch.chdir(folder)
    got = import_step("user_mlp:step", ARGS, ANALYTIC_KINDS, "mlp", grouped=True, groups=6)
    save_graph(got.graph, folder / "old.json.gz")
    save_graph(got.grouping.graph, folder / "old.grouped.json.gz")
    return folder / "old.json.gz", folder / "old.grouped.json.gz"


def _compare(path, preset, capsys):
    code = main(["compare", str(path), "--preset", preset, "--devices", "2", "--methods", "single,etf", "--quiet"])
    out, err = capsys.readouterr()
    return code, out, err


def test_every_preset_kind_is_an_analytic_kind_that_built_and_imported_graphs_carry():
    assert set(COST_KINDS) == set(SPECS)
    for name in PRESETS:
        assert set(cluster_preset(name, 2).kinds) <= set(SPECS), name


@pytest.mark.parametrize("preset", NEW_KINDS)
def test_compare_on_a_shipped_graph(preset, capsys):
    code, out, err = _compare(DATASETS / "nmt" / "nmt_004.json.gz", preset, capsys)
    assert code == 0, err
    assert "| nmt_004 | 2 |" in out and "| etf |" in out


def test_import_jax_writes_every_kind_and_compare_runs_on_the_new_presets(user_folder, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(user_folder)
    out, grouped = tmp_path / "mlp.json.gz", tmp_path / "mlp.grouped.json.gz"
    assert main(["import-jax", "user_mlp:step", "--args-spec", ARGS, "--out", str(out), "--grouped-out",
                 str(grouped), "--groups", "6"]) == 0
    assert f"costs for {', '.join(COST_KINDS)}" in capsys.readouterr().out
    for path in (out, grouped):
        assert load_graph(path).kinds == COST_KINDS
        for preset in NEW_KINDS:
            code, text, err = _compare(path, preset, capsys)
            assert code == 0 and "| mlp | 2 |" in text, err


def test_a_traced_graph_without_a_kind_gets_its_analytic_costs_on_demand(user_folder, monkeypatch, capsys):
    op_path, _ = _old_import(user_folder, monkeypatch)
    old = load_graph(op_path)
    assert old.kinds == ANALYTIC_KINDS
    text = dumps_graph(old)
    for kind in ("h100-pcie", "h200"):
        want = annotate_costs(old, (kind,)).costs[kind]  # what import-jax now records
        assert old.has_costs(kind) and np.array_equal(old.cost_for(kind), want)
        assert old.cost_for(kind) is old.cost_for(kind) and not old.cost_for(kind).flags.writeable  # cached
    assert old.kinds == ANALYTIC_KINDS and dumps_graph(old) == text  # nothing written to the graph
    for preset in NEW_KINDS:
        code, out, err = _compare(op_path, preset, capsys)
        assert code == 0 and "| mlp | 2 |" in out, err
    assert load_graph(op_path).kinds == ANALYTIC_KINDS  # the user's file untouched


def test_simulate_on_h200_nvlink_and_the_simulators_agree(user_folder, monkeypatch, tmp_path, capsys):
    op_path, _ = _old_import(user_folder, monkeypatch)
    graph = load_graph(op_path)
    placement = np.arange(graph.n_nodes) % 2
    save_placement(tmp_path / "p.json", placement, ["/gpu:0", "/gpu:1"])
    assert main(["simulate", str(op_path), "--placement", str(tmp_path / "p.json"), "--preset", "h200-nvlink",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    cluster = cluster_preset("h200-nvlink", 2)
    fast, ref = simulate(graph, placement, cluster), simulate_reference(graph, placement, cluster)
    assert result["runtime_us"] == fast.runtime == ref.runtime
    assert np.array_equal(fast.start, ref.start)
    scaled, scaled_cluster = scale_units(graph, cluster, 4.0)  # derived costs scale with the recorded ones
    assert simulate(scaled, placement, scaled_cluster).runtime == pytest.approx(4.0 * fast.runtime)


def test_graphs_without_op_descriptions_fail_in_one_line(user_folder, monkeypatch, tmp_path, capsys):
    _, grouped = _old_import(user_folder, monkeypatch)
    code, _, err = _compare(grouped, "h100-pcie", capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "no costs for device kind 'h100-pcie' (it has: k80, v100, a100, h100, cpu)" in err
    assert "import-jax" in err
    save_graph(layered_dag(20, seed=0, kinds=("k80",)), tmp_path / "hand.json")
    save_placement(tmp_path / "p.json", np.zeros(20, dtype=int), ["/gpu:0", "/gpu:1"])
    for argv in (["compare", str(tmp_path / "hand.json"), "--preset", "h200-nvlink", "--methods", "single",
                  "--quiet"],
                 ["simulate", str(tmp_path / "hand.json"), "--placement", str(tmp_path / "p.json"), "--preset",
                  "h200-nvlink"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert "no costs for device kind 'h200' (it has: k80)" in err and "add 'h200' costs" in err
    graph = load_graph(tmp_path / "hand.json")
    assert not graph.has_costs("h200")
    with pytest.raises(InputError, match="'local-h200' is no analytic kind"):
        graph.cost_for("local-h200")
