"""What the generalizing policies start from and how they train (issue: zero-shot that transfers).

- Placeto's "etf" start: episodes begin at the better of m-ETF's placement and the single device, and a greedy
  pass (which keeps the best placement it visits) is never slower than either; its "list" start: the best of
  m-ETF, m-SCT, m-TOPO, HEFT and the single device.
- gdp's etf list decoder at its initialisation with exact ties to the lowest device is m-ETF exactly; its
  imitation target is the scheduler's choice; keep_single makes the one pass never slower than the single device;
  the greedy (self-critical) baseline and the imitation term train.
- Training on (graph, cluster) pairs, and the distribution's held-out groups.
"""

import dataclasses

import jax

import numpy as np
import pytest

from placeto import distribution as dist
from placeto.baselines import etf, single
from simulator.workloads.generated import build, gen_specs
from placeto.objective import score_batch
from simulator import cluster_preset, load_graph
from simulator.model.generate import layered_dag

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def small_tasks():
    """A shipped family graph on 4 K80s, a generated graph on its own cluster, and a GPU+CPU cluster."""
    ptb = load_graph(ROOT / "datasets" / "ptb" / "ptb_013.json.gz")
    gen = [build(s) for s in gen_specs("gen-forkjoin", 2, split="test", max_nodes=80)]
    return [(ptb, cluster_preset("placeto-k80", 4)), (ptb, cluster_preset("h100-nvlink-cpu", 4)), *gen]


# ---- Placeto ------------------------------------------------------------------------------------------------
def test_placeto_etf_start_is_the_better_of_etf_and_single():
    from placeto.methods.placeto import env as E
    from placeto.methods.placeto.config import tiny

    for graph, cluster in small_tasks():
        ctx = E.make_context(graph, cluster, tiny(init_placement="etf"))
        state, _ = E.reset(ctx, seed=0, batch=2)
        cands = np.stack([etf(graph, cluster), single(graph, cluster)])
        scores = score_batch(graph, cands, cluster)
        np.testing.assert_array_equal(state.placement[0, :graph.n_nodes], cands[int(np.argmin(scores))])
        assert state.runtime[0] == pytest.approx(scores.min())


def test_placeto_list_start_is_the_best_of_the_list_schedulers_and_single(tmp_path):
    """init_placement "list": episodes begin at the best (objective) of m-ETF, m-SCT, m-TOPO,
    HEFT and the single device, so never slower than the "etf" start; a greedy pass from it is never slower."""
    from placeto.baselines import get_method
    from placeto.methods.placeto import env as E
    from placeto.methods.placeto.config import tiny
    from placeto.methods.placeto.place import place
    from placeto.methods.placeto.train import train

    strictly_better = 0
    for graph, cluster in small_tasks():
        names = ("etf", "m-sct", "m-topo", "heft", "single")
        cands = np.stack([get_method(m)(graph, cluster, 0) for m in names])
        scores = score_batch(graph, cands, cluster)
        state, _ = E.reset(E.make_context(graph, cluster, tiny(init_placement="list")), seed=0, batch=1)
        np.testing.assert_array_equal(state.placement[0, :graph.n_nodes], cands[int(np.argmin(scores))])
        etf_start, _ = E.reset(E.make_context(graph, cluster, tiny(init_placement="etf")), seed=0, batch=1)
        assert state.runtime[0] <= etf_start.runtime[0] * (1 + 1e-12)
        strictly_better += state.runtime[0] < etf_start.runtime[0] * (1 - 1e-9)
    assert strictly_better >= 1  # the other schedulers matter on these tasks
    graph, cluster = small_tasks()[0]
    train(tiny(init_placement="list", episodes=2, episodes_per_update=1), [graph], cluster, tmp_path / "run")
    res = place(graph, cluster, tmp_path / "run")
    assert res.runtime <= E.reset(E.make_context(graph, cluster, tiny(init_placement="list")), seed=0,
                                  batch=1)[0].runtime[0] * (1 + 1e-12)


def test_placeto_greedy_pass_from_etf_is_never_slower_than_etf_or_single(tmp_path):
    from placeto.methods.placeto.config import tiny
    from placeto.methods.placeto.place import place
    from placeto.methods.placeto.train import train

    graph, cluster = small_tasks()[1]
    train(tiny(init_placement="etf", episodes=2, episodes_per_update=1), [graph], cluster, tmp_path / "run")
    for g, c in small_tasks():
        if c.n_devices > 8:
            continue
        res = place(g, c, tmp_path / "run")
        base = score_batch(g, np.stack([etf(g, c), single(g, c)]), c)
        assert res.runtime <= base.min() * (1 + 1e-12)


def test_placeto_trains_on_graph_cluster_pairs(tmp_path):
    from placeto.methods.placeto.config import tiny
    from placeto.methods.placeto.train import make_tasks, train

    pairs = small_tasks()[2:]
    tasks = make_tasks(pairs, None, seed=0)
    assert sorted(t.key for t in tasks) == sorted(f"{g.name}@{c.n_devices}d" for g, c in pairs)
    assert all(t.cluster is dict((id(g), c) for g, c in pairs)[id(t.graph)] for t in tasks)
    s = train(tiny(init_placement="etf", episodes=2, episodes_per_update=1), pairs, None, tmp_path / "run")
    assert s.episodes == 2


# ---- gdp ----------------------------------------------------------------------------------------------------
def _fresh(config, graph, cluster):
    from placeto.methods.gdp.ppo import init_params, make_task

    return init_params(config, make_task(graph, cluster, config))


def test_gdp_etf_decoder_initialisation_is_m_etf_with_lowest_ties():
    from placeto.methods.gdp.config import large
    from placeto.methods.gdp.place import greedy_placement

    config = large(greedy_ties="lowest", hidden=16, heads=2, sage_rounds=1, attn_layers=1, segment=16)
    for d in (2, 4, 8):
        graph, cluster = load_graph(ROOT / "datasets" / "nmt" / "nmt_004.json.gz"), cluster_preset("placeto-k80", d)
        placement = greedy_placement(config, _fresh(config, graph, cluster), graph, cluster)
        np.testing.assert_array_equal(placement, etf(graph, cluster))


def test_gdp_keep_single_is_never_slower_than_the_single_device():
    from placeto.methods.gdp.config import large
    from placeto.methods.gdp.place import greedy_placement

    config = large(greedy_ties="lowest", hidden=16, heads=2, sage_rounds=1, attn_layers=1, segment=16)
    for graph, cluster in small_tasks():
        params = _fresh(config, graph, cluster)
        kept = greedy_placement(dataclasses.replace(config, keep_single=True), params, graph, cluster)
        plain = greedy_placement(config, params, graph, cluster)
        s = score_batch(graph, np.stack([kept, plain, single(graph, cluster)]), cluster)
        assert s[0] <= min(s[1], s[2])


def test_scheduler_choice_is_the_earliest_finish_lowest_on_ties():
    from placeto.methods.gdp.ppo import scheduler_choice

    feat = np.zeros((1, 3, 4, 2), np.float32)
    feat[0, 0, :, 0] = [-1.0, 0.0, 0.0, -2.0]  # tie between 1 and 2: the lowest
    feat[0, 1, :, 0] = [0.0, -0.5, -0.1, 0.0]  # device 3 not allowed below; 0 wins
    feat[0, 2, :, 0] = [0.0, -0.3, -0.1, -0.2]
    allowed = np.ones((1, 3, 4), bool)
    allowed[0, 1, 3] = False
    allowed[0, 2, 0] = False  # the earliest finish is not allowed: the best allowed one
    assert scheduler_choice(feat, allowed).tolist() == [[1, 0, 2]]


@pytest.mark.parametrize("baseline, imitation", [("greedy", 0.0), ("mean", 1.0), ("greedy", 0.1)])
def test_gdp_ppo_step_with_greedy_baseline_and_imitation(baseline, imitation):
    import jax

    from placeto.methods.gdp.config import large
    from placeto.methods.gdp.model import make_net
    from placeto.methods.gdp.ppo import make_optimizer, make_task, ppo_step

    config = large(greedy_ties="lowest", hidden=16, heads=2, sage_rounds=1, attn_layers=1, segment=16,
                   samples_per_update=4, baseline=baseline, imitation=imitation)
    graph, cluster = layered_dag(30, seed=1), cluster_preset("placeto-k80", 3)
    task = make_task(graph, cluster, config)
    params = _fresh(config, graph, cluster)
    opt = make_optimizer(config)
    r = ppo_step(make_net(config), config, opt, params, opt.init(params), task, jax.random.key(0))
    assert np.isfinite(r.loss) and np.isfinite(r.best_objective)
    moved = jax.tree.leaves(jax.tree.map(lambda a, b: float(np.abs(np.asarray(a) - np.asarray(b)).max()),
                                         r.params, params))
    assert max(moved) > 0


def test_gdp_config_checks_the_new_fields():
    from placeto.methods.gdp.config import GdpConfig, large

    for bad in ({"baseline": "median"}, {"greedy_ties": "highest"}, {"imitation": -1.0}, {"imitation": float("nan")}):
        with pytest.raises(ValueError):
            large(**bad)
    with pytest.raises(ValueError):
        GdpConfig(baseline="greedy")  # the independent decoder has no greedy decoding to compare with
    assert GdpConfig.from_dict(dict({"method": "gdp"})).greedy_ties == "random"  # runs written before the field


def test_gdp_trains_on_graph_cluster_pairs(tmp_path):
    from placeto.methods.gdp.config import large
    from placeto.methods.gdp.train import train

    config = large(greedy_ties="lowest", hidden=16, heads=2, sage_rounds=1, attn_layers=1, segment=16,
                   samples_per_update=4, episodes=8, baseline="greedy", imitation=0.1, checkpoint_seconds=0.0)
    s = train(config, small_tasks()[2:], None, tmp_path / "run")
    assert s.updates == 2 and len(s.best_objective) == 2


# ---- the distribution ---------------------------------------------------------------------------------------
def test_distribution_groups_cover_every_family_once():
    from simulator.workloads.families import ALL_FAMILIES
    from simulator.workloads.generated import GEN_FAMILIES

    fams = dist.families()
    assert sorted(fams) == sorted((*ALL_FAMILIES, *GEN_FAMILIES)) and len(set(fams)) == len(fams)
    assert {dist.group_of(f) for f in fams} == set(dist.GROUPS)


def test_training_tasks_leave_the_held_out_group_out():
    tasks = dist.training_tasks("dense", max_graphs=1)
    fams = {t.family for t in tasks}
    assert not fams & set(dist.GROUPS["dense"])
    assert set(dist.GROUPS["recurrent"]) <= fams and set(dist.GROUPS["generated"]) <= fams
    assert all(t.graph.n_nodes <= 1000 for t in tasks)
    assert {t.cluster.n_devices for t in tasks if t.family == "nmt"} == {2, 4, 8}
    assert [t.graph.name for t in tasks] == [t.graph.name for t in dist.training_tasks("dense", max_graphs=1)]


def test_snapshots_and_selection_on_validation_tasks(tmp_path, monkeypatch):
    import json

    from flax import serialization

    from experiments.reproduce import generalization as G
    from placeto.methods.placeto.config import tiny
    from placeto.methods.placeto.train import train

    graph, cluster = small_tasks()[0]
    run = tmp_path / "placeto-without-none"
    train(tiny(init_placement="etf", episodes=3, episodes_per_update=1, snapshot_seconds=1e-6), [graph], cluster, run)
    snaps = sorted(p.name for p in (run / "snapshots").glob("*.msgpack"))
    assert snaps[0] == "00000000.msgpack" and len(snaps) >= 3  # where the run started, then every update
    monkeypatch.setattr(G, "RUNS", tmp_path)
    monkeypatch.setattr(G, "validation_tasks", lambda held_out: [dist.Task("ptb", graph, cluster)])
    record = G.select("none", passes=(1, 2))
    # every snapshot and the checkpoint, 1 and 2 passes, from the "etf" and the "list" start
    assert len(record["candidates"]) == 2 * 2 * (len(snaps) + 1)
    assert {(c["passes"], c["start"]) for c in record["candidates"]} == {(1, "etf"), (2, "etf"), (1, "list"),
                                                                          (2, "list")}
    best = min(c["x_etf"] for c in record["candidates"])
    chosen = record["chosen"]
    assert chosen["x_etf"] == best and json.loads((run / "selection.json").read_text()) == record
    config = json.loads((run / "config.json").read_text())
    assert (config["passes"], config["init_placement"]) == (chosen["passes"], chosen["start"])
    blob = serialization.msgpack_restore((run / "checkpoint.msgpack").read_bytes())
    if chosen["params"] != "checkpoint":
        snap = serialization.msgpack_restore((run / "snapshots" / chosen["params"]).read_bytes())
        for a, b in zip(jax.tree.leaves(blob["params"]), jax.tree.leaves(snap["params"])):
            np.testing.assert_array_equal(a, b)
    assert blob["episode"] == 3  # the rest of the checkpoint (where training is) is kept


def test_memory_constrained_tasks_are_below_the_single_devices_peak():
    from simulator import simulate

    base = dist.family_tasks("nmt", "train", max_graphs=1)
    tasks = dist.memory_constrained(base)
    assert len(tasks) == sum(t.cluster.n_devices > 1 for t in base) and tasks
    for t in tasks:
        peak = simulate(t.graph, np.zeros(t.graph.n_nodes, np.int32), t.cluster).peak_memory[0]
        assert t.family == "nmt@mem" and dist.group_of(t.family) == "recurrent"
        assert peak / t.cluster.n_devices < max(t.cluster.memory) < peak  # one device is not enough
    with_memory = dist.training_tasks("dense", max_graphs=1, memory=True)
    assert {t.family for t in with_memory if t.family.endswith("@mem")} == {"ptb@mem", "nmt@mem", "cifar10@mem",
                                                                             "cnn@mem"}
