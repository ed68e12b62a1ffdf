"""Rollouts split across workers (placeto.methods.placeto.episodes, placeto.rollouts.workers, placeto.rollouts.distributed): any split of a
batch gives the batch of one worker bit for bit; `--workers 2` on Ray writes the checkpoint of `--workers 1`,
for every learned method, with a worker killed mid-update too; compare fans graphs out; bad input is one line.

The Ray tests share one local Ray (num_cpus=2) started once for the file; they need the `ray` extra
(pip install 'placeto[ray]', part of `make test`) and are skipped only when Ray is not installed."""

import importlib.util
import os
import signal
import sys

import jax
import numpy as np
import pytest

from placeto.rollouts import distributed as D
from placeto.methods.placeto import env as E
from placeto.methods.placeto import train as T
from placeto.cli.main import main
from placeto.methods.placeto.config import tiny
from placeto.methods.placeto.episodes import collect_episodes, concat_rollouts
from placeto.methods.gdp import ppo
from placeto.methods.gdp.config import tiny as gdp_tiny
from placeto.methods.gdp.model import make_net as gdp_net
from placeto.methods.gdp.train import train as gdp_train
from placeto.methods.sequence.specs import get_spec
from placeto.methods.sequence.reinforce import concat_drawn, draw_range, init_params
from placeto.methods.sequence.rundir import train as pergraph_train
from placeto.methods.placeto.policy import make_policy
from placeto.methods.placeto.rollout_workers import WORKER
from placeto.rollouts.workers import SerialPool, partition
from simulator import cluster_preset, save_graph
from simulator.model.generate import layered_dag

# its module fixtures are costly: `make test` (--dist loadgroup) runs the whole module on one worker, so they run once
pytestmark = pytest.mark.xdist_group("test_distributed")

HAVE_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAVE_RAY, reason="Ray is not installed (pip install 'placeto[ray]')")
GRAPHS = [layered_dag(16, seed=1), layered_dag(20, seed=2)]
CLUSTER = cluster_preset("placeto-k80", 3)
SPLITS = [[(0, 5)], [(0, 2), (2, 5)], [(0, 1), (1, 3), (3, 5)]]  # one worker, two, three (uneven)


def assert_same(a, b):
    """Equal pytrees, bit for bit (None leaves equal)."""
    jax.tree.map(np.testing.assert_array_equal, a, b)


def test_partition_covers_the_range_in_order():
    assert partition(5, 2) == [(0, 3), (3, 5)]
    assert partition(2, 4) == [(0, 1), (1, 2)]  # more workers than episodes: the idle ones get nothing
    for total in range(0, 12):
        for parts in range(1, 6):
            ranges = partition(total, parts)
            assert [i for lo, hi in ranges for i in range(lo, hi)] == list(range(total))
            assert max((hi - lo for lo, hi in ranges), default=0) - min((hi - lo for lo, hi in ranges), default=0) <= 1
    with pytest.raises(ValueError):
        partition(4, 0)


@pytest.mark.parametrize("init,embed_every", [("single", 1), ("random", 1), ("random", 3)])
def test_placeto_episodes_are_the_same_however_the_batch_is_split(init, embed_every):
    config = tiny(init_placement=init, counterfactual=init == "random", embed_every=embed_every)
    ctx = E.make_context(GRAPHS[0], CLUSTER, config)
    arrays, policy = jax.device_put(ctx.arrays), make_policy(config)
    params, key = policy.init(jax.random.key(3), arrays), jax.random.key(7)
    runs = [concat_rollouts([collect_episodes(policy, params, ctx, arrays, key, 11, lo, hi, config.counterfactual)
                             for lo, hi in split]) for split in SPLITS]
    for ro in runs[1:]:
        assert_same(ro, runs[0])
    assert len(np.unique(runs[0].actions, axis=1).T) > 1, "episodes should differ from one another"


def test_gdp_samples_are_the_same_however_the_batch_is_split():
    config = gdp_tiny()
    task, net = ppo.make_task(GRAPHS[1], CLUSTER, config), gdp_net(config)
    params, key = ppo.init_params(config, task), jax.random.key(5)
    runs = [ppo.concat_drawn([ppo.draw_range(net, config, params, task, key, lo, hi) for lo, hi in split])
            for split in SPLITS]
    for d in runs[1:]:
        assert_same(d, runs[0])
    assert len(np.unique(runs[0].acts, axis=0)) == 5


@pytest.mark.parametrize("method", ["rnn", "hierarchical"])
def test_pergraph_samples_are_the_same_however_the_batch_is_split(method):
    spec = get_spec(method)
    config = spec.presets["tiny"](devices=CLUSTER.n_devices)
    net, inputs = spec.make_net(config), spec.make_inputs(GRAPHS[0], CLUSTER, config)
    params, key = init_params(net, inputs, 0), jax.random.key(9)
    runs = [concat_drawn([draw_range(net, config, params, inputs, GRAPHS[0], CLUSTER, key, lo, hi)
                          for lo, hi in split]) for split in SPLITS]
    for d in runs[1:]:
        assert_same(d, runs[0])
    assert len(np.unique(runs[0].sampled.placement, axis=0)) > 1


def test_serial_pool_of_three_equals_one():
    config = tiny()
    one = SerialPool(WORKER, (config, [(GRAPHS[0], CLUSTER)]), 1)
    three = SerialPool(WORKER, (config, [(GRAPHS[0], CLUSTER)]), 3)
    params = make_policy(config).init(jax.random.key(0), one.worker.arrays[0])
    args = (0, np.asarray(jax.random.key_data(jax.random.key(1))), 4)
    a, b = one.run(params, args, 4), three.run(params, args, 4)
    assert len(a) == 1 and len(b) == 3
    assert_same(concat_rollouts(a), concat_rollouts(b))


# ---- command line without Ray ------------------------------------------------------------------------------
def _train_argv(tmp_path, *extra):
    save_graph(GRAPHS[0], tmp_path / "g.json")
    return ["train", "--graph", str(tmp_path / "g.json"), "--devices", "3", "--config", "tiny", "--episodes", "4",
            "--out", str(tmp_path / "run"), *extra]


@pytest.mark.parametrize("count", ["0", "-1", "x"])
def test_bad_worker_counts_are_one_line(tmp_path, capsys, count):
    with pytest.raises(SystemExit) as exit_:
        main(_train_argv(tmp_path, "--workers", count))
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1
    assert f"argument --workers: expected an integer in [1, 1024], got {count if count != 'x' else repr(count)}" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("extra, message", [
    (["--ray-address", "127.0.0.1:6379"], "--ray-address needs --workers N"),
    (["--workers", "1", "--ray-address", "no-port"], "--ray-address: expected HOST:PORT"),
])
def test_bad_ray_addresses_are_one_line(tmp_path, capsys, extra, message):
    if not HAVE_RAY and extra[0] == "--workers":
        pytest.skip("without Ray, --workers stops first (test_workers_without_ray_says_how_to_get_it)")
    assert main(_train_argv(tmp_path, *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_workers_without_ray_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    for argv in (_train_argv(tmp_path, "--workers", "2"),
                 ["compare", str(tmp_path / "g.json"), "--devices", "2", "--methods", "single", "--workers", "2"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "pip install 'placeto[ray]'" in err and len(err.strip().splitlines()) == 1


# ---- on Ray ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ray_local():
    """One local Ray for the module (2 CPUs, quiet)."""
    if not HAVE_RAY:
        pytest.skip("Ray is not installed (pip install 'placeto[ray]')")
    ray = D.start(num_cpus=2)
    yield ray
    ray.shutdown()


def _checkpoint(out):
    return (out / "checkpoint.msgpack").read_bytes()


def _save_graphs(folder, graphs) -> list[str]:
    """The graphs written to folder/<name>.json: their paths."""
    for g in graphs:
        save_graph(g, folder / f"{g.name}.json")
    return [str(folder / f"{g.name}.json") for g in graphs]


PLACETO = tiny(episodes=12, episodes_per_update=4, init_placement="random")


@pytest.fixture(scope="module")
def placeto_two(ray_local, tmp_path_factory):
    """A Placeto run with `placeto train --workers 2` (PLACETO's settings): its run directory."""
    tmp = tmp_path_factory.mktemp("placeto_two")
    assert main(["train", "--graph", *_save_graphs(tmp, GRAPHS), "--devices", "3",
                 "--config", "tiny", "--episodes", "12", "--set", "episodes_per_update=4", "init_placement=random",
                 "--out", str(tmp / "run"), "--workers", "2"]) == 0
    return tmp / "run"


@needs_ray
def test_placeto_two_workers_write_the_checkpoint_of_one(placeto_two, tmp_path):
    T.train(PLACETO, GRAPHS, CLUSTER, tmp_path / "one", workers=D.WorkerSpec(1))
    assert _checkpoint(tmp_path / "one") == _checkpoint(placeto_two)
    T.train(PLACETO, GRAPHS, CLUSTER, tmp_path / "plain")  # without workers: one key per batch, another run
    assert _checkpoint(tmp_path / "plain") != _checkpoint(placeto_two)


@needs_ray
def test_a_worker_killed_mid_update_is_restarted_and_its_share_redone(placeto_two, tmp_path, monkeypatch):
    real_submit, killed, later = D.RayPool.submit, [], []

    def submit_and_kill(self, *args):
        refs = real_submit(self, *args)
        if not killed:  # the first update's shares submitted, then worker 0's process killed while on its share
            os.kill(self.started_pids[0], signal.SIGKILL)
            killed.append(self.started_pids[0])
        elif not later:
            later.append(self.pids()[0])
        return refs

    monkeypatch.setattr(D.RayPool, "submit", submit_and_kill)
    T.train(PLACETO, GRAPHS, CLUSTER, tmp_path / "killed", workers=D.WorkerSpec(2))
    assert killed and later and later != killed, "worker 0 should run in a new process after the kill"
    assert _checkpoint(placeto_two) == _checkpoint(tmp_path / "killed")


@needs_ray
def test_a_run_whose_workers_do_not_answer_stops_with_an_error(ray_local, tmp_path):
    config = tiny(episodes=8, episodes_per_update=4)
    with pytest.raises(D.WorkerError, match="rollouts took more than"):
        T.train(config, GRAPHS[:1], CLUSTER, tmp_path, workers=D.WorkerSpec(2, timeout_s=1e-3))


@needs_ray
def test_gdp_two_workers_write_the_checkpoint_of_one(ray_local, tmp_path):
    config = gdp_tiny(episodes=3 * 16)
    clusters = [CLUSTER, cluster_preset("placeto-k80", 2)]
    one = gdp_train(config, GRAPHS, clusters, tmp_path / "one", workers=D.WorkerSpec(1))
    files = _save_graphs(tmp_path, GRAPHS)
    assert main(["train", "--method", "gdp", "--graph", *files, "--devices", "3,2", "--config", "tiny", "--episodes",
                 "48", "--out", str(tmp_path / "two"), "--workers", "2"]) == 0
    assert one.updates == 3 and _checkpoint(tmp_path / "one") == _checkpoint(tmp_path / "two")


@needs_ray
def test_pergraph_two_workers_write_the_checkpoint_of_one(ray_local, tmp_path):
    """The hierarchical planner (the rnn placer's batches take the same path: placeto.methods.sequence.rundir's worker pool; both
    methods' splits are checked equal above without Ray)."""
    method = "hierarchical"
    config = get_spec(method).presets["tiny"](devices=2, episodes=3 * 16)
    pergraph_train(config, GRAPHS[0], cluster_preset("placeto-k80", 2), tmp_path / "one", workers=D.WorkerSpec(1))
    assert main(["train", "--method", method, "--graph", *_save_graphs(tmp_path, GRAPHS[:1]), "--devices", "2",
                 "--config", "tiny", "--episodes", "48", "--out", str(tmp_path / "two"), "--workers", "2"]) == 0
    assert _checkpoint(tmp_path / "one") == _checkpoint(tmp_path / "two")


def test_an_unreachable_address_is_one_line(tmp_path, capsys):
    if not HAVE_RAY:
        pytest.skip("without Ray, --workers stops first (test_workers_without_ray_says_how_to_get_it)")
    assert main(_train_argv(tmp_path, "--workers", "1", "--ray-address", "127.0.0.1:1")) == 2
    err = capsys.readouterr().err
    assert "--ray-address 127.0.0.1:1: no Ray head answers there" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


@needs_ray
def test_compare_on_workers_gives_the_serial_table(ray_local, tmp_path):
    from placeto.harness.compare import compare

    graphs, methods = [layered_dag(30, seed=4), layered_dag(24, seed=5)], ["single", "random", "etf"]
    serial = compare(graphs, [2, 3], methods, budget=40, progress=False, save_placements=tmp_path / "a")
    fanned = compare(graphs, [2, 3], methods, budget=40, progress=False, save_placements=tmp_path / "b",
                     workers=D.WorkerSpec(2))
    key = lambda r: (r.graph, r.n_devices, r.method, r.runtime_us, r.ratio_to_best, r.simulator_calls)  # noqa: E731
    assert [key(r) for r in serial] == [key(r) for r in fanned]
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "b").iterdir()) and len(files) == 12
    assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)
