"""gdp's list decoders (placeto.methods.gdp.decoder): the numba kernels equal the plain reference, their limits
are HEFT and m-ETF, a fresh policy decodes m-ETF's placement, PPO re-evaluates exactly the log-probabilities it
sampled, batches do not depend on how they are split, training resumes bit for bit, and the place / search /
fine-tune paths run on it. Tiny configs only."""

import jax
import numpy as np
import pytest

from placeto.baselines.etf import etf
from placeto.baselines.heft import heft
from placeto.methods.gdp.config import GdpConfig, tiny
from placeto.methods.gdp.decoder import decode, decode_reference
from placeto.methods.gdp.model import make_net
from placeto.methods.gdp.place import greedy_placement, load_run, run_gdp
from placeto.methods.gdp.ppo import (concat_drawn, decoded_log_policy, decoder_heads, draw, draw_range, init_params,
                                     make_task)
from placeto.methods.gdp.train import train
from placeto.objective import metered, score_batch
from simulator import cluster_preset, simulate
from simulator.model.cluster import Cluster, Device
from simulator.model.generate import branching_blocks, layered_dag

CONFIG = tiny(decoder="etf", samples_per_update=8)
N = 60  # every graph here has about N nodes: one padded shape, one compilation of each jitted function


def _outputs(graph, cluster, config=CONFIG):
    task = make_task(graph, cluster, config)
    params = init_params(config, task)
    return task, params, *(np.asarray(a) for a in decoder_heads(make_net(config), params, task.inputs))


def _tight(graph, n_dev):
    """placeto-k80 devices with 30% of an even share of the graph's memory: the tiers decide."""
    total = float(graph.persistent_bytes.sum() + graph.node_out_bytes.sum())
    return Cluster("tight", tuple(Device(f"/gpu:{i}", "k80", total / n_dev * 0.3) for i in range(n_dev)),
                   5.7, 25.0, 7600.0)


@pytest.mark.parametrize("order", ["heft", "etf"])
@pytest.mark.parametrize("seed", range(3))
def test_kernels_equal_the_reference_sampled_and_greedy(seed, order):
    graph = (layered_dag if seed % 2 else branching_blocks)(N - seed, seed=seed)
    cluster = _tight(graph, 3) if seed == 2 else cluster_preset("placeto-k80", 2 + seed)
    _, _, scores, weight = _outputs(graph, cluster)
    uniforms = np.random.default_rng(seed).random((3, graph.n_nodes))
    for u, temperature, greedy in ((uniforms, 1.7, False), (None, 1.0, True), (uniforms, 1.0, True)):
        fast, ref = decode(graph, cluster, scores, weight, temperature, u, order, greedy), \
            decode_reference(graph, cluster, scores, weight, temperature, u, order, greedy)
        for a, b in zip(fast, ref):
            np.testing.assert_array_equal(a, b)
    if seed == 2:  # the memory tiers masked some devices at some decisions
        assert not fast.allowed.all()


@pytest.mark.parametrize("order, scheduler", [("heft", heft), ("etf", etf)])
def test_no_scores_and_a_huge_weight_is_the_list_scheduler(order, scheduler):
    graph = layered_dag(150, seed=4)
    for cluster in (cluster_preset("placeto-k80", 4), _tight(graph, 3)):
        d = cluster.n_devices
        weight = np.tile([1e6, 0.0], (graph.n_nodes, 1))
        dec = decode(graph, cluster, np.zeros((graph.n_nodes, d)), weight, 1.0, None, order)
        np.testing.assert_array_equal(dec.acts[0], scheduler(graph, cluster))


def test_ppo_reevaluates_the_sampled_log_probabilities_and_splits_do_not_matter():
    graph, cluster = layered_dag(N, seed=2), cluster_preset("placeto-k80", 3)
    task, params, scores, weight = _outputs(graph, cluster)
    net, key = make_net(CONFIG), jax.random.key(5)
    with metered():
        whole = draw(net, CONFIG, params, task, key)
        parts = concat_drawn([draw_range(net, CONFIG, params, task, key, 0, 5),
                              draw_range(net, CONFIG, params, task, key, 5, CONFIG.samples_per_update)])
    for a, b in zip(whole, parts):
        np.testing.assert_array_equal(a, b)
    logp = np.asarray(decoded_log_policy(scores, weight, whole.feat, whole.allowed, CONFIG.temperature))
    chosen = np.take_along_axis(logp, whole.acts[..., None], -1)[..., 0][:, :graph.n_nodes]
    np.testing.assert_allclose(chosen, whole.logp[:, :graph.n_nodes], atol=1e-5)
    assert len({tuple(a) for a in whole.acts}) > 1  # the samples differ
    np.testing.assert_array_equal(whole.objective, score_batch(graph, whole.acts[:, :graph.n_nodes], cluster))


def test_train_resumes_bit_for_bit(tmp_path):
    graphs, clusters = [layered_dag(N, 0)], [cluster_preset("placeto-k80", 2), cluster_preset("placeto-k80", 3)]
    config = CONFIG.replace(episodes=3 * 8)
    train(config, graphs, clusters, tmp_path / "a")
    train(config.replace(episodes=1 * 8), graphs, clusters, tmp_path / "b")
    s = train(config, graphs, clusters, tmp_path / "b")
    assert s.start_update == 1 and s.updates == 3
    assert (tmp_path / "a" / "checkpoint.msgpack").read_bytes() == (tmp_path / "b" / "checkpoint.msgpack").read_bytes()
    loaded, params = load_run(tmp_path / "a")
    assert loaded == config and loaded.decoder == "etf"
    z = train(config.replace(episodes=0), graphs, clusters, tmp_path / "z")  # no update: the initialisation
    assert z.updates == 0 and z.samples == 0
    init = init_params(config, make_task(graphs[0], clusters[0], config))
    assert jax.tree.all(jax.tree.map(np.array_equal, load_run(tmp_path / "z")[1], init))
    p = greedy_placement(loaded, params, graphs[0], clusters[0])
    assert p.shape == (graphs[0].n_nodes,) and simulate(graphs[0], p, clusters[0]).runtime > 0


def test_place_and_search_run_on_the_list_decoder(tmp_path):
    graph, cluster = layered_dag(N, seed=9), cluster_preset("placeto-k80", 3)
    train(CONFIG.replace(episodes=0), [layered_dag(N, seed=1)], cluster, tmp_path / "run")  # the initialisation
    config, params = load_run(tmp_path / "run")
    greedy = float(score_batch(graph, greedy_placement(config, params, graph, cluster)[None], cluster)[0])
    for kwargs in ({"budget": 30, "search": True}, {"budget": 20}):  # (fine-tuning: train's PPO step and draw)
        run, _ = run_gdp(graph, cluster, tmp_path / "run", seed=1, **kwargs)
        assert run.simulator_calls <= kwargs["budget"]
        assert float(score_batch(graph, run.placement[None], cluster)[0]) <= greedy


def test_decoder_is_a_model_field_and_old_configs_keep_the_independent_decoder():
    d = {"method": "gdp", **{k: v for k, v in GdpConfig().__dict__.items() if k != "decoder"}}
    assert GdpConfig.from_dict(d).decoder == "independent"
    assert len({GdpConfig(decoder=d).model_fields() for d in ("independent", "heft", "etf")}) == 3
    with pytest.raises(ValueError, match="decoder"):
        GdpConfig(decoder="autoregressive")


def test_a_fresh_policy_is_the_list_scheduler_up_to_its_tie_breaks():
    """Scores and load weight start at 0: fresh parameters decode m-ETF's (HEFT's) placement with ties to the lowest
    device; the one pass (greedy_placement) breaks the ties with key(TIE_SEED)'s uniforms, the same every call."""
    from placeto.methods.gdp.ppo import TIE_SEED, decoder_uniforms

    graph, cluster = branching_blocks(N, seed=6), cluster_preset("placeto-k80", 4)
    ties = np.asarray(decoder_uniforms(jax.random.key(TIE_SEED), np.zeros(1, np.uint32), graph.n_nodes), np.float64)
    for order, scheduler in (("etf", etf), ("heft", heft)):
        config = CONFIG.replace(decoder=order)
        task, params, scores, weight = _outputs(graph, cluster, config)
        assert not scores.any() and not weight[:, 1].any()
        np.testing.assert_array_equal(decode(graph, cluster, scores, weight, 1.0, None, order).acts[0],
                                      scheduler(graph, cluster))
        one_pass = greedy_placement(config, params, graph, cluster)
        np.testing.assert_array_equal(one_pass, decode(graph, cluster, scores, weight, 1.0, ties, order, True).acts[0])
        np.testing.assert_array_equal(one_pass, greedy_placement(config, params, graph, cluster))


def test_train_reads_a_directory_of_graphs_by_name_and_checks_the_preset(tmp_path, capsys):
    from placeto.cli.main import main
    from placeto.cli.placers import graph_files
    from simulator import save_graph

    (tmp_path / "graphs").mkdir()
    for name in ("b", "a"):
        save_graph(layered_dag(20, seed=1), tmp_path / "graphs" / f"{name}.json.gz")
    (tmp_path / "graphs" / "notes.txt").write_text("not a graph")
    one = str(tmp_path / "one.json")
    assert graph_files([str(tmp_path / "graphs"), one]) == [str(tmp_path / "graphs" / "a.json.gz"),
                                                             str(tmp_path / "graphs" / "b.json.gz"), one]
    assert main(["train", "--config", "large", "--graph", str(tmp_path / "graphs"), "--out",
                 str(tmp_path / "p")]) == 2
    assert "--config large is not a preset of placeto" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["train", "--method", "gdp", "--graph", str(tmp_path / "empty"), "--out", str(tmp_path / "q")]) == 2
    assert "without graph files" in capsys.readouterr().err


def test_graphs_above_the_threshold_default_to_the_shipped_large_graph_policy():
    from placeto.methods import registry
    from placeto.methods.base import LARGE_GRAPH_NODES
    from placeto.policies import resolve_checkpoint

    gdp = registry.get("gdp")
    assert gdp.default_for(LARGE_GRAPH_NODES) == "gdp-general" and gdp.default_for(LARGE_GRAPH_NODES + 1) == "gdp-large"
    config, _ = load_run(resolve_checkpoint("gdp-large"))
    assert config.decoder == "etf" and registry.get("placeto").default_for(10**6) is None


@pytest.mark.parametrize("field, value", [("decoder", "beam"), ("coarse_groups", -1), ("coarse_groups", "many"),
                                          ("coarse_ccr", -2.0), ("coarse_ccr", None), ("greedy_ties", "highest"),
                                          ("baseline", "median"), ("imitation", -1.0), ("imitation", "lots"),
                                          ("keep_single", "yes"), ("keep_single", 1)])
def test_a_checkpoint_with_a_bad_decoding_field_is_one_line_and_exit_2(tmp_path, capsys, field, value):
    import json

    from placeto.cli.main import main
    from simulator import save_graph

    graph = layered_dag(20, seed=2)
    save_graph(graph, tmp_path / "g.json")
    (tmp_path / "run").mkdir()
    config = json.loads(CONFIG.to_json())
    (tmp_path / "run" / "config.json").write_text(json.dumps({**config, field: value}))
    (tmp_path / "run" / "checkpoint.msgpack").write_bytes(b"")
    assert main(["place", str(tmp_path / "g.json"), "--checkpoint", str(tmp_path / "run"), "--method", "gdp",
                 "--devices", "2", "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0] and "config.json" in err[0] and "Traceback" not in err[0]


def test_communication_ratio_is_transfer_time_over_compute():
    from simulator.model.stats import communication_ratio
    from simulator.model.result import min_costs

    graph, cluster = layered_dag(N, seed=5), cluster_preset("placeto-k80", 3)
    comm = 0.0
    for src, out in zip(graph.edge_src.tolist(), graph.edge_out.tolist()):
        nbytes = float(graph.out_bytes[graph.out_offsets[src] + out])
        comm += cluster.delta2_us + cluster.latency_us + nbytes / cluster.bandwidth_bytes_per_us
    assert communication_ratio(graph, cluster) == pytest.approx(comm / float(min_costs(graph, cluster).sum()))
    cheap = layered_dag(N, seed=5, mean_cost_us=5.0)  # the same draws, costs 20x smaller (rounded)
    assert communication_ratio(cheap, cluster) == pytest.approx(20 * communication_ratio(graph, cluster), rel=1e-4)


def test_coarse_to_fine_places_the_groups_and_scores_every_sample_on_the_ops(tmp_path):
    """A communication-bound graph above coarse_groups is placed through its grouping: one device per group, every
    objective the op graph's; a compute-bound one (or coarse_groups 0) is placed as it is."""
    from placeto.methods.gdp import METHOD
    from placeto.methods.gdp.place import coarse_view, placing_task

    graph, cluster = layered_dag(N, seed=5, mean_cost_us=5.0), cluster_preset("placeto-k80", 3)
    config = CONFIG.replace(coarse_groups=20)
    assert coarse_view(graph, cluster, config)
    assert not coarse_view(graph, cluster, CONFIG) and not coarse_view(layered_dag(N, seed=5), cluster, config)
    task, _ = placing_task(graph, cluster, config)
    assert task.graph.n_nodes <= 20 and task.ops is graph and task.op_group.shape == (N,)
    acts = np.random.default_rng(0).integers(0, 3, (4, task.graph.n_nodes))
    with metered() as m:
        np.testing.assert_array_equal(task.score(acts), score_batch(graph, acts[:, task.op_group], cluster))
    assert m.calls == 8

    def one_device_per_group(p):
        return p.shape == (N,) and all(len(set(p[task.op_group == g].tolist())) == 1
                                       for g in range(task.graph.n_nodes))

    train(config.replace(episodes=0), [layered_dag(N, seed=1)], cluster, tmp_path / "run")
    loaded, params = load_run(tmp_path / "run")
    assert loaded.coarse_groups == 20
    note = METHOD.note  # what `placeto place` prints
    assert "coarse-to-fine through 20 groups, placed as its groups" in note(graph, cluster, tmp_path / "run", 1)
    assert "decoded as its groups and as ops" in note(graph, cluster, tmp_path / "run", 5)
    assert note(layered_dag(N, seed=5), cluster, tmp_path / "run", 5) is None
    greedy = greedy_placement(loaded, params, graph, cluster)
    assert one_device_per_group(greedy)
    np.testing.assert_array_equal(greedy, greedy_placement(loaded, params, graph, cluster))  # deterministic
    first = float(score_batch(graph, greedy[None], cluster)[0])
    op_level = greedy_placement(loaded.replace(coarse_groups=0), params, graph, cluster)
    views = [first, float(score_batch(graph, op_level[None], cluster)[0])]  # the groups' one pass, the ops'
    for kwargs in ({"budget": 20}, {"budget": 30, "search": True}):  # search: on the ops, from the better prior
        run, _ = run_gdp(graph, cluster, tmp_path / "run", seed=1, **kwargs)
        assert run.placement.shape == (N,) and run.simulator_calls <= kwargs["budget"]
        assert float(score_batch(graph, run.placement[None], cluster)[0]) <= min(views)
        assert "search" in kwargs or one_device_per_group(run.placement)  # the groups' view won: their samples
    assert views[0] < views[1]


def test_the_simulating_modes_spend_their_budget_on_the_better_view(tmp_path):
    """Forced coarse (coarse_ccr 0) on a compute-bound graph, where the grouping loses: run_gdp keeps to the ops."""
    from placeto.methods.gdp.place import _better_view, coarse_view, placing_task

    graph, cluster = layered_dag(N, seed=5), cluster_preset("placeto-k80", 3)
    train(CONFIG.replace(episodes=0, coarse_groups=20, coarse_ccr=0.0), [layered_dag(N, seed=1)], cluster,
          tmp_path / "run")
    config, params = load_run(tmp_path / "run")
    assert coarse_view(graph, cluster, config)
    views = [float(score_batch(graph, greedy_placement(c, params, graph, cluster)[None], cluster)[0])
             for c in (config, config.replace(coarse_groups=0))]
    assert views[1] < views[0]
    coarse, _ = placing_task(graph, cluster, config)
    ops = make_task(graph, cluster, config)
    with metered() as m:
        for order in ([coarse, ops], [ops, coarse]):
            assert _better_view(config, make_net(config), params, order) is ops
    assert m.calls == 4  # one greedy placement of each view, scored on the ops
    run, _ = run_gdp(graph, cluster, tmp_path / "run", seed=1, budget=20)
    assert float(score_batch(graph, run.placement[None], cluster)[0]) <= views[1]


def test_coarse_groups_must_be_a_non_negative_integer():
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="coarse_groups"):
            GdpConfig(coarse_groups=bad)
    with pytest.raises(ValueError, match="coarse_ccr"):
        GdpConfig(coarse_ccr=-1.0)


def test_etf_order_on_mixed_devices_equals_the_reference_and_m_etf():
    """A CPU and two K80s, each node's costs apart per kind: m-ETF's node order (among each node's earliest-finish
    pairs) is the kernels' and the reference's, and its limit is m-ETF."""
    graph, cluster = layered_dag(N, seed=7, kinds=("k80", "cpu")), cluster_preset("placeto-k80-cpu", 3)
    _, _, scores, weight = _outputs(graph, cluster)
    uniforms = np.random.default_rng(7).random((2, graph.n_nodes))
    for a, b in zip(decode(graph, cluster, scores, weight, 1.3, uniforms, "etf"),
                    decode_reference(graph, cluster, scores, weight, 1.3, uniforms, "etf")):
        np.testing.assert_array_equal(a, b)
    huge = np.tile([1e6, 0.0], (graph.n_nodes, 1))
    zero = np.zeros((graph.n_nodes, cluster.n_devices))
    for dec in (decode(graph, cluster, zero, huge, 1.0, None, "etf"),
                decode_reference(graph, cluster, zero, huge, 1.0, None, "etf")):
        np.testing.assert_array_equal(dec.acts[0], etf(graph, cluster))
