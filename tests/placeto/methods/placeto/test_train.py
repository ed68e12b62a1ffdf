"""REINFORCE training: return/baseline arithmetic, a toy graph with a known optimum, kill-and-resume, outputs."""

import json

import jax
import numpy as np
import pytest
from flax import serialization

from placeto.methods.placeto import gradient as PG
from placeto.methods.placeto import train as T
from placeto.methods.placeto.config import tiny
from placeto.methods.placeto import place as P
from placeto.methods.placeto.place import load_params, place, place_graph
from placeto.harness.plots_train import plot_run
from simulator import cluster_preset, load_placement, simulate_reference
from simulator.model.generate import layered_dag
from simulator.model.graph import make_graph


def test_returns_to_go_matches_a_plain_loop():
    r = np.random.default_rng(0).normal(size=(7, 3))
    for gamma in (1.0, 0.9):
        expect = np.array([[sum(gamma**k * r[t + k, b] for k in range(7 - t)) for b in range(3)] for t in range(7)])
        np.testing.assert_allclose(PG.returns_to_go(r, gamma), expect)


def test_baseline_is_the_mean_over_a_window_of_recent_episodes():
    base, mean = PG.baseline_update(None, np.array([[1.0, 3.0], [0.0, 2.0]]), window=3)
    np.testing.assert_allclose(mean, [2.0, 1.0])
    base, mean = PG.baseline_update(base, np.array([[5.0, 7.0], [4.0, 6.0]]), window=3)
    np.testing.assert_allclose(mean, [(3 + 5 + 7) / 3, (2 + 4 + 6) / 3])  # the oldest episode dropped
    assert int(base.count) == 4


def two_chains(length=8):
    """Two independent chains of heavy nodes (100 us) with tiny tensors: on 2 devices the optimum runs them in
    parallel and halves the single-device runtime."""
    nodes = [{"name": f"{c}{i}", "op": "op", "cost": 100.0, "out_bytes": [64]} for c in "ab" for i in range(length)]
    edges = [(k * length + i, k * length + i + 1, 0) for k in range(2) for i in range(length - 1)]
    return make_graph("two_chains", nodes, edges)


def test_toy_optimum_is_learned(tmp_path):
    g, cluster = two_chains(), cluster_preset("placeto-k80", 2)
    optimum = simulate_reference(g, np.repeat([0, 1], 8), cluster).runtime
    single = simulate_reference(g, np.zeros(16, int), cluster).runtime
    assert optimum == pytest.approx(single / 2, rel=0.01)
    # gamma 1: the optimum needs foresight (one-step rewards lead a policy to move both chains to the empty
    # device, one node at a time); the default gamma 0 is tuned for the families, not for this toy. REINFORCE from
    # scratch depends on its seed (and on XLA's rounding): of seeds 0, 1, 2, one must reach the optimum.
    for seed in (0, 1, 2):
        config = tiny(episodes=480, episodes_per_update=8, lr=1e-2, lr_end=1e-3, gamma=1.0, seed=seed)
        T.train(config, [g], cluster, tmp_path / str(seed))
        res = place(g, cluster, tmp_path / str(seed))  # greedy
        final = simulate_reference(g, res.final_placement, cluster).runtime
        if final <= 1.05 * optimum:
            break
    assert final <= 1.05 * optimum
    assert res.runtime <= 1.05 * optimum


def test_kill_and_resume(tmp_path, monkeypatch):
    graphs, cluster = [layered_dag(24, seed=1), layered_dag(30, seed=2)], cluster_preset("placeto-k80", 3)
    config = tiny(episodes=24, episodes_per_update=4, checkpoint_seconds=0.0)
    real_update, calls = T._update, []

    def crash_on_third(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # a kill between updates
        return real_update(*args)

    monkeypatch.setattr(T, "_update", crash_on_third)
    with pytest.raises(KeyboardInterrupt):
        T.train(config, graphs, cluster, tmp_path)
    monkeypatch.setattr(T, "_update", real_update)
    _, saved = load_params(tmp_path)

    seen = {}

    def spy(config_, policy, grad_fn, apply, st, *rest):
        seen.setdefault("params", st.params)
        seen.setdefault("episode", st.episode)
        return real_update(config_, policy, grad_fn, apply, st, *rest)

    monkeypatch.setattr(T, "_update", spy)
    with (tmp_path / "metrics.csv").open("a") as f:  # a row logged after the checkpoint, before the kill
        f.write("3,12,x" + ",0" * 20 + "\n")
    summary = T.train(config, graphs, cluster, tmp_path)
    assert seen["episode"] == 8 and summary.start_episode == 8 and summary.episodes == 24
    jax.tree.map(np.testing.assert_array_equal, seen["params"], saved)
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + 6  # header + one row per update, across both runs
    assert T.train(config, graphs, cluster, tmp_path).episodes == 24  # a finished run stays finished


def test_outputs_place_and_plot(tmp_path):
    g, cluster = layered_dag(40, seed=3), cluster_preset("placeto-k80", 2)
    summary = T.train(tiny(episodes=8), [g], cluster, tmp_path)
    assert summary.sim_calls > 0 and summary.episodes_per_second > 0
    best = load_placement(summary.best_placement_files[g.name], g, 2)
    assert best.made_for.graph.name == g.name and best.made_for.cluster.cluster == cluster  # what it was made for
    assert simulate_reference(g, best.assignment, cluster).runtime == pytest.approx(summary.best_runtime[g.name])
    assert json.loads((tmp_path / "config.json").read_text())["episodes"] == 8
    assert (tmp_path / "tb").is_dir()
    other = layered_dag(44, seed=4)  # unseen, same padding bucket, more devices
    p, calls = place_graph(other, cluster_preset("placeto-k80", 4), tmp_path, samples=0)
    assert p.shape == (44,) and p.max() < 4 and calls >= 1
    p2, calls2 = place_graph(other, cluster_preset("placeto-k80", 4), tmp_path, samples=4, seed=1)
    assert calls2 > calls
    assert all(f.exists() for f in plot_run(tmp_path))


def test_sigkilled_cli_run_resumes_when_rerun(tmp_path):
    """A real `placeto train` process killed with SIGKILL mid-run; the same command then resumes and finishes."""
    import csv
    import signal
    import subprocess
    import sys
    import time

    from simulator.model.io import save_graph

    save_graph(layered_dag(24, seed=5), tmp_path / "g.json")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "placeto.cli.main", "train", "--graph", str(tmp_path / "g.json"), "--devices", "2",
           "--out", str(out), "--config", "tiny", "--episodes", "200", "--set", "checkpoint_seconds=0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    metrics, deadline = out / "metrics.csv", time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if (out / "checkpoint.msgpack").exists() and metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = len(metrics.read_text().splitlines()) - 1
    assert 2 <= done_before < 50
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    now = int(rerun.stdout.split("episodes (")[1].split(" now")[0])
    assert 0 < now < 200  # resumed: fewer episodes ran this time than the budget
    with metrics.open() as f:
        updates = [int(r["update"]) for r in csv.DictReader(f)]
    assert updates == list(range(1, 51))  # every update logged once across the kill
    blob = serialization.msgpack_restore((out / "checkpoint.msgpack").read_bytes())
    assert int(blob["episode"]) == 200


def test_counterfactual_advantages_and_training(tmp_path):
    """Counterfactual: every device's immediate reward (centred) enters the gradient; REINFORCE keeps the rest."""
    g, cluster = layered_dag(20, seed=8), cluster_preset("placeto-k80", 3)
    config = tiny(counterfactual=True, gamma=0.5, normalize_advantages=False)
    ctx = T.E.make_context(g, cluster, config)
    policy = T.make_policy(config)
    arrays = jax.device_put(ctx.arrays)
    params = policy.init(jax.random.key(0), arrays)
    ro = T.collect_rollout(policy, params, ctx, arrays, jax.random.key(1), 4, 0, counterfactual=True)
    assert ro.action_rewards.shape == (20, 4, 3)
    taken = np.take_along_axis(ro.action_rewards, ro.actions[..., None], axis=-1)[..., 0]
    np.testing.assert_array_equal(taken, ro.rewards)  # the sampled device's entry is the reward step() gave
    st = T.TrainState(params, None, {}, jax.random.key(0))
    adv, action_adv = T.advantages(config, ro, st, "g")
    future = PG.returns_to_go(ro.rewards, 0.5) - ro.rewards
    np.testing.assert_allclose(adv, future - future.mean(1, keepdims=True), atol=1e-6)  # baseline: batch mean
    np.testing.assert_allclose(action_adv[..., :3], ro.action_rewards - ro.action_rewards.mean(-1, keepdims=True))
    assert not action_adv[..., 3:].any()  # padded devices
    summary = T.train(config.replace(episodes=8), [g], cluster, tmp_path)
    assert summary.sim_calls >= 8 * 20 * 3  # every device simulated at every step


def test_best_device_targets_prefer_the_current_device_on_ties():
    from types import SimpleNamespace

    from placeto.methods.placeto.train import best_device_targets

    # 2 steps, 2 episodes, 3 devices; the node of step 0 is node 1, of step 1 node 0; placements before each step
    placement = np.zeros((2, 2, 4), np.int8)
    placement[0, :, 1] = [2, 0]  # episode 0 has node 1 on device 2, episode 1 on device 0
    placement[1, :, 0] = [1, 1]
    rewards = np.array([[[0.1, 0.3, 0.3], [0.5, 0.2, 0.1]],  # ties 1/2 (current 2: stay) | best 0 (= current)
                        [[0.0, 0.0, 0.0], [0.2, 0.1, 0.2]]])  # all tie (current 1: stay) | ties 0/2, current 1
    ro = SimpleNamespace(action_rewards=rewards, placement=placement, nodes=np.array([1, 0]))
    t = best_device_targets(ro)
    np.testing.assert_array_equal(t[0, 0], [0, 0, 1])
    np.testing.assert_array_equal(t[0, 1], [1, 0, 0])
    np.testing.assert_array_equal(t[1, 0], [0, 1, 0])
    np.testing.assert_array_equal(t[1, 1], [0.5, 0, 0.5])


def test_best_device_targets_weigh_the_moves():
    from types import SimpleNamespace

    from placeto.methods.placeto.train import best_device_targets

    placement = np.zeros((1, 2, 3), np.int8)  # step 0 places node 0, on device 0 in both episodes
    rewards = np.array([[[0.2, 0.1, 0.0], [0.0, 0.3, 0.1]]])  # episode 0: stay is best; episode 1: move to 1
    ro = SimpleNamespace(action_rewards=rewards, placement=placement, nodes=np.array([0]))
    t = best_device_targets(ro, move_weight=4.0)
    np.testing.assert_array_equal(t[0, 0], [1, 0, 0])  # staying keeps weight 1
    np.testing.assert_array_equal(t[0, 1], [0, 4, 0])
    np.testing.assert_array_equal(best_device_targets(ro)[0, 1], [0, 1, 0])


@pytest.mark.parametrize("method, trained, asked", [("placeto", "4", "8"), ("gdp", "2", "4"), ("rnn", "2", "4")])
def test_resume_with_other_devices_is_one_line(tmp_path, capsys, method, trained, asked):
    """`train --devices 8` on a run trained at 4 devices refuses (it would train another task), naming the run
    and both counts, and writes nothing (gdp's tiny preset places on at most 4 devices)."""
    from placeto.cli.main import main
    from simulator.model.io import save_graph

    save_graph(layered_dag(12, seed=1), tmp_path / "g.json")
    run = tmp_path / "run"
    base = ["train", "--method", method, "--graph", str(tmp_path / "g.json"), "--config", "tiny", "--out", str(run)]
    episodes = {"placeto": "4", "gdp": "1", "rnn": "16"}[method]
    assert main(base + ["--devices", trained, "--episodes", episodes]) == 0
    capsys.readouterr()
    before = (run / "checkpoint.msgpack").read_bytes()
    assert main(base + ["--devices", asked, "--episodes", episodes]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(run) in err and trained in err and asked in err, err
    assert (run / "checkpoint.msgpack").read_bytes() == before  # nothing written


def test_improving_targets_are_the_best_move_where_one_helps():
    from types import SimpleNamespace

    from placeto.methods.placeto.train import improving_targets

    # staying rewards 0 exactly; episode 0: two moves tie for best; episode 1: no move helps
    rewards = np.array([[[0.0, 0.3, 0.3], [0.0, -0.1, 1e-12]]])
    t = improving_targets(SimpleNamespace(action_rewards=rewards))
    np.testing.assert_array_equal(t[0, 0], [0, 0.5, 0.5])
    np.testing.assert_array_equal(t[0, 1], [0, 0, 0])


def test_placing_reads_the_checkpoint_each_time_and_traces_the_network_once(tmp_path, monkeypatch):
    """The parameter template is memoised per network (a trace of a quarter second per placement otherwise); the
    parameters themselves are read from the run directory at every call, so a new checkpoint is what places."""
    graph, cluster = layered_dag(16, seed=3), cluster_preset("placeto-k80", 2)
    T.train(tiny(episodes=2, episodes_per_update=1, checkpoint_seconds=0.0), [graph], cluster, tmp_path)
    P._template.cache_clear()
    traced, real = [], P.param_template
    monkeypatch.setattr(P, "param_template", lambda init: traced.append(1) or real(init))
    _, first = load_params(tmp_path)
    place(graph, cluster, tmp_path)
    assert len(traced) == 1
    path = tmp_path / "checkpoint.msgpack"
    blob = serialization.msgpack_restore(path.read_bytes())
    blob["params"] = jax.tree.map(lambda x: np.asarray(x) * 2, blob["params"])
    path.write_bytes(serialization.msgpack_serialize(blob))
    _, second = load_params(tmp_path)
    assert len(traced) == 1
    pairs = list(zip(jax.tree.leaves(first), jax.tree.leaves(second)))
    assert pairs and all(np.array_equal(np.asarray(b), 2 * np.asarray(a)) for a, b in pairs)
