"""GDP (placeto.methods.gdp): shapes without N x N arrays, valid samples, PPO on toys with known optima,
determinism in the seed, resume, and the CLI (train / place / compare) end to end. Tiny configs only."""

import json

import jax
import numpy as np
import pytest

from placeto.cli.main import main
from placeto.methods.gdp.config import GdpConfig, tiny
from placeto.methods.gdp.model import make_net
from placeto.methods.gdp.place import _sample, greedy_placement, is_gdp_run, load_run
from placeto.methods.gdp.ppo import init_params, make_task
from placeto.methods.gdp.train import train
from simulator import cluster_preset, save_graph, simulate
from simulator.model.generate import layered_dag
from simulator.model.graph import make_graph

CONFIG = tiny()


def chains(length=4, cost=1000.0, kinds=False, out_bytes=8):
    """Two independent chains a0 -> a1 -> ... and b0 -> b1 -> ... of equal cost per node."""
    c = {"k80": cost / 10, "cpu": cost} if kinds else cost
    nodes = [{"name": f"{x}{i}", "cost": c, "out_bytes": [out_bytes]} for x in "ab" for i in range(length)]
    edges = [(k * length + i, k * length + i + 1, 0) for k in range(2) for i in range(length - 1)]
    return make_graph("two_chains", nodes, edges)


@pytest.mark.parametrize("n_nodes, n_dev", [(100, 2), (300, 3)])  # Np > every feature width
def test_model_runs_on_any_size_and_device_count_without_n_by_n_arrays(n_nodes, n_dev):
    graph, cluster = layered_dag(n_nodes, seed=n_dev), cluster_preset("placeto-k80", n_dev)
    task = make_task(graph, cluster, CONFIG)
    net, params = make_net(CONFIG), init_params(CONFIG, task)
    n_pad = task.inputs.nodes.shape[0]
    jaxpr = jax.make_jaxpr(lambda p: net.apply(p, task.inputs))(params)
    shapes = [v.aval.shape for eqn in jaxpr.eqns for v in eqn.outvars]
    assert not [s for s in shapes if sum(d >= n_pad for d in s) >= 2], "an N x N intermediate"
    assert jax.eval_shape(net.apply, params, task.inputs).shape == (n_pad, CONFIG.max_devices)
    draws, greedy = _sample(net, params, task.inputs, jax.random.key(0), 64)
    real = np.asarray(draws)[:, :n_nodes]
    assert real.min() >= 0 and real.max() < n_dev, "a padded device was sampled"
    assert set(np.unique(real)) == set(range(n_dev))
    assert np.asarray(greedy)[:n_nodes].max() < n_dev


def test_concat_dense_is_dense_on_the_concatenation():
    """The device head's ConcatDense has nn.Dense's parameters (same initial values from the same key) and output,
    with parts broadcast against each other instead of concatenated."""
    import flax.linen as nn

    from placeto.methods.gdp.model import ConcatDense

    rng = np.random.default_rng(0)
    a, b, c = (rng.normal(size=s).astype(np.float32) for s in ((5, 1, 7), (5, 3, 2), (1, 3, 4)))
    full = np.concatenate([np.broadcast_to(a, (5, 3, 7)), b, np.broadcast_to(c, (5, 3, 4))], axis=-1)
    dense_params = nn.Dense(6).init(jax.random.key(1), full)
    params = ConcatDense(6).init(jax.random.key(1), a, b, c)
    assert jax.tree.all(jax.tree.map(np.array_equal, params, dense_params))
    np.testing.assert_allclose(ConcatDense(6).apply(params, a, b, c), nn.Dense(6).apply(params, full),
                               rtol=1e-5, atol=1e-5)


def test_ppo_finds_the_two_chains_optimum():
    """Two equal heavy chains on 2 devices: the optimum runs them on different devices, 4 x 1000 us + 3 x
    delta1; the best placement PPO samples within 12 updates is it."""
    graph, cluster = chains(), cluster_preset("placeto-k80", 2)
    optimum = simulate(graph, [0] * 4 + [1] * 4, cluster).runtime
    assert optimum == pytest.approx(4000 + 3 * 5.7 + 25.0 + 8 / 7600, abs=30)
    s = train(CONFIG.replace(episodes=12 * 16), [graph], cluster, _tmp("chains"))
    assert s.best_objective["two_chains@2d"] == pytest.approx(optimum)


def test_ppo_learns_to_avoid_the_slow_device():
    """CPU (10x slower) + GPU: the greedy policy after 12 updates puts every node on the GPU (the optimum)."""
    graph, cluster = chains(kinds=True), cluster_preset("placeto-k80-cpu", 2)
    out = _tmp("cpu")
    train(CONFIG.replace(episodes=12 * 16), [graph], cluster, out)
    config, params = load_run(out)
    assert greedy_placement(config, params, graph, cluster).tolist() == [1] * 8


def test_same_seed_same_checkpoint_and_resume_equals_uninterrupted(tmp_path):
    graphs = [layered_dag(40, 0), layered_dag(25, 1)]
    clusters = [cluster_preset("placeto-k80", 2), cluster_preset("placeto-k80", 3)]
    config = CONFIG.replace(episodes=6 * 16)
    train(config, graphs, clusters, tmp_path / "a")
    train(config, graphs, clusters, tmp_path / "b")
    # interrupted after 3 updates (as a kill after the third checkpoint leaves it), then resumed
    train(config.replace(episodes=3 * 16), graphs, clusters, tmp_path / "c")
    s = train(config, graphs, clusters, tmp_path / "c")
    assert s.start_update == 3 and s.updates == 6
    blob = (tmp_path / "a" / "checkpoint.msgpack").read_bytes()
    assert blob == (tmp_path / "b" / "checkpoint.msgpack").read_bytes()
    assert blob == (tmp_path / "c" / "checkpoint.msgpack").read_bytes()
    rows = (tmp_path / "c" / "metrics.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == [str(u) for u in range(6)]
    train(config.replace(seed=1), graphs, clusters, tmp_path / "d")
    assert blob != (tmp_path / "d" / "checkpoint.msgpack").read_bytes()


def test_config_round_trip_and_method_field():
    c = CONFIG.replace(time_limit_minutes=float("inf"))
    import json

    d = json.loads(c.to_json())
    assert d["method"] == "gdp" and GdpConfig.from_dict(d) == c
    with pytest.raises(ValueError):
        GdpConfig.from_dict({**d, "method": "placeto"})


def test_cli_train_place_compare(tmp_path, capsys):
    graph = layered_dag(40, seed=5)
    save_graph(graph, tmp_path / "g.json")
    run = tmp_path / "run"
    assert main(["train", "--method", "gdp", "--graph", str(tmp_path / "g.json"), "--devices", "2,3",
                 "--config", "tiny", "--episodes", "64", "--out", str(run), "--set", "samples_per_update=8"]) == 0
    err = capsys.readouterr().err  # the progress bar: placements sampled, of the 64 --episodes asked
    assert "64/64" in err and "placement" in err and "best=" in err and "compiling the first update" in err
    assert is_gdp_run(run) and (run / "metrics.csv").is_file()
    assert json.loads((run / "config.json").read_text())["samples_per_update"] == 8  # --set takes GdpConfig fields
    assert main(["place", str(tmp_path / "g.json"), "--checkpoint", str(run), "--devices", "3",
                 "--samples", "15", "--out", str(tmp_path / "p.json")]) == 0
    out = capsys.readouterr().out
    assert "gdp" in out and "16 simulator calls" in out
    assert main(["place", str(tmp_path / "g.json"), "--checkpoint", str(run), "--devices", "3", "--method",
                 "gdp-search", "--budget", "60", "--out", str(tmp_path / "q.json")]) == 0
    out = capsys.readouterr().out
    assert "gdp-search" in out and "60 simulator calls" in out
    assert main(["compare", str(tmp_path / "g.json"), "--methods", "gdp,gdp-search,single", "--checkpoint", str(run),
                 "--devices", "2", "--budget", "32", "--quiet", "--out", str(tmp_path / "cmp")]) == 0
    csv = (tmp_path / "cmp" / "compare.csv").read_text()
    assert ",gdp," in csv and ",gdp-search," in csv


def test_gdp_search_starts_from_the_policy_and_only_improves():
    """gdp-search returns a placement at least as good as the policy's greedy one, deterministic in the seed."""
    from placeto.methods.gdp.place import run_gdp
    from placeto.objective import score_batch

    run_dir = _tmp("search_run")
    train(CONFIG.replace(episodes=4 * 16), [layered_dag(40, seed=7)], cluster_preset("placeto-k80", 3), run_dir)
    graph, cluster = layered_dag(60, seed=8), cluster_preset("placeto-k80", 3)
    config, params = load_run(run_dir)
    greedy = greedy_placement(config, params, graph, cluster)
    a, _ = run_gdp(graph, cluster, run_dir, seed=3, budget=200, search=True)
    b, _ = run_gdp(graph, cluster, run_dir, seed=3, budget=200, search=True)
    assert a.simulator_calls <= 200 and np.array_equal(a.placement, b.placement)
    scores = score_batch(graph, np.stack([a.placement, greedy]), cluster)
    assert scores[0] <= scores[1]


_TMP = {}


def _tmp(name):
    import tempfile
    from pathlib import Path

    _TMP.setdefault("root", tempfile.TemporaryDirectory())
    return Path(_TMP["root"].name) / name


def test_finetune_simulates_each_updates_greedy_placement_with_its_batch():
    """Fine-tuning keeps the best of every batch and of the greedy placement of the parameters that drew it (one
    more simulator call per update); the first update's greedy placement is the starting policy's."""
    from placeto.methods.gdp.place import finetune
    from placeto.objective import metered, score_batch

    graph, cluster = layered_dag(60, seed=3), cluster_preset("placeto-k80", 2)
    config = CONFIG.replace(samples_per_update=4, entropy=0.0)
    params = init_params(config, make_task(graph, cluster, config))
    greedy = greedy_placement(config, params, graph, cluster)
    with metered() as m:
        _, best_p, best = finetune(config, params, make_task(graph, cluster, config), 0, 1)
    assert m.calls == config.samples_per_update + 1
    assert best <= float(score_batch(graph, greedy[None], cluster)[0])
    assert best == float(score_batch(graph, best_p[None], cluster)[0])


def test_finetune_settings_replace_the_policys_batch_epochs_and_lr():
    """run_gdp fine-tunes with FinetuneSettings, not the policy's training settings: 20 episodes in batches of 8
    are 3 updates of 8 samples + 1 greedy each, then one greedy placement; bad settings are ValueErrors."""
    from placeto.methods.gdp.config import FinetuneSettings
    from placeto.methods.gdp.place import run_gdp

    tune = FinetuneSettings(samples_per_update=8, ppo_epochs=1, lr=1e-3)
    assert tune.apply(CONFIG).samples_per_update == 8 and tune.apply(CONFIG).hidden == CONFIG.hidden
    assert FinetuneSettings.of_training(CONFIG).apply(CONFIG) == CONFIG
    for bad in ({"samples_per_update": 0}, {"ppo_epochs": True}, {"lr": 0.0}, {"lr": float("inf")}):
        with pytest.raises(ValueError):
            FinetuneSettings(**bad)
    graph, cluster = layered_dag(40, seed=1), cluster_preset("placeto-k80", 2)
    run, _ = run_gdp(graph, cluster, "gdp-nmt", 0, budget=3 * 9 + 1, finetune_episodes=20, tune=tune)
    assert run.simulator_calls == 3 * 9 + 1
    assert run.placement.shape == (graph.n_nodes,) and simulate(graph, run.placement, cluster).runtime > 0


def test_temperature_flattens_the_policy_and_is_what_ppo_samples_and_trains():
    """log_policy at temperature T is the log-softmax of logits / T: the argmax stays, the entropy grows with T;
    sample_batch's log-probabilities are those of the tempered policy; PpoSettings and FinetuneSettings carry T;
    a temperature that is not a positive finite number is a ValueError."""
    import jax.numpy as jnp

    from placeto.methods.gdp.config import FinetuneSettings
    from placeto.methods.gdp.model import log_policy
    from placeto.methods.gdp.ppo import PpoSettings, sample_batch

    graph, cluster = layered_dag(50, seed=2), cluster_preset("placeto-k80", 3)
    task = make_task(graph, cluster, CONFIG)
    net, params = make_net(CONFIG), init_params(CONFIG, task)
    logits = net.apply(params, task.inputs)
    lp1, lp3 = log_policy(net, params, task.inputs), log_policy(net, params, task.inputs, 3.0)
    np.testing.assert_allclose(lp3, jax.nn.log_softmax(logits / 3.0, axis=-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(jnp.argmax(lp1, -1), jnp.argmax(lp3, -1))
    real = np.asarray(task.inputs.node_mask)
    entropy = [float(-(jnp.exp(lp) * lp).sum(-1)[real].mean()) for lp in (lp1, lp3)]
    assert entropy[1] > entropy[0]
    acts, logp, _ = sample_batch(net, params, task.inputs, jax.random.key(0), 4, 3.0)
    np.testing.assert_allclose(logp, np.take_along_axis(np.asarray(lp3), np.asarray(acts).T, 1).T, rtol=1e-5,
                               atol=1e-5)
    tuned = FinetuneSettings(temperature=2.5).apply(CONFIG)
    assert tuned.temperature == 2.5 and PpoSettings.of(tuned).temperature == 2.5
    assert FinetuneSettings.of_training(tuned).temperature == 2.5
    for bad in (0.0, -1.0, float("inf"), float("nan"), True):
        with pytest.raises(ValueError, match="temperature"):
            FinetuneSettings(temperature=bad)
        with pytest.raises(ValueError, match="temperature"):
            CONFIG.replace(temperature=bad)


def test_sampled_batches_take_sizes_compiled_before_the_budget():
    """A budget's last, smaller batches of sampled decodings take a power of two (or the full batch), all
    compiled by run_gdp before its meter opens: no XLA compilation inside the budget."""
    from placeto.methods.gdp.place import _batch_sizes

    assert _batch_sizes(16) == [1, 2, 4, 8, 16] and _batch_sizes(12) == [1, 2, 4, 8, 12] and _batch_sizes(1) == [1]
