"""Rollouts and comparisons on Ray: the one module that imports Ray.

Ray is an optional extra: pip install 'placeto[ray]'.

Training with `--workers N` keeps the learner in this process (the driver) and runs the rollouts (policy
inference and simulation) in N Ray actors. Each update the driver puts the parameters in Ray's object store
once, every actor computes its range of the batch (placeto.rollouts.workers), and the driver concatenates the
ranges in order and takes the update: synchronous, so the checkpoint is the same for every N (see
placeto.rollouts.workers for why).

Faults. An actor that dies (a killed process, a lost node) is restarted by Ray, up to `max_restarts` times,
rebuilding its worker from the same data, and the task it was running is retried (`max_task_retries`): its share
is redone and the update is as if nothing happened. Every wait has a timeout (`timeout_s`), after which the run
stops with a `WorkerError` (one line from the CLI, exit status 1), the last checkpoint kept: rerunning the
command resumes from it, as after a lost driver.

Without `--ray-address` a local Ray starts on the driver's host (one CPU per worker, no dashboard, workers'
output not forwarded). With one, the driver joins that cluster; its nodes must have placeto installed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import math
import os
import socket
import warnings
from typing import Any, Callable, Sequence

from placeto.rollouts.workers import make_worker, partition
from simulator.model.errors import InputError

RAY_HINT = "pip install 'placeto[ray]'"


class WorkerError(RuntimeError):
    """The Ray workers did not deliver: a timeout, or a worker that kept dying."""


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    """Where and how rollouts (or compare's graphs) run on Ray."""

    workers: int
    """Ray actors (compare: concurrent tasks), >= 1; each takes one CPU of the cluster."""
    address: str | None = None
    """A Ray cluster to join: "HOST:PORT", "ray://HOST:PORT" or "auto"; None: start one.

    "HOST:PORT": its head's; "ray://HOST:PORT": Ray client. None: start a local Ray on the driver's host.
    """
    timeout_s: float = 1800.0
    """Longest wait for one update's rollouts, in seconds, before WorkerError.

    compare: for the next graph to finish.
    """
    start_timeout_s: float = 300.0
    """Longest wait for the actors to start (import, build their tasks), in seconds."""
    max_restarts: int = 3
    """Restarts of a dead actor (and retries of its task) before WorkerError."""
    connect_timeout_s: float = 5.0
    """Longest wait for a TCP connection to `address`, in seconds."""

    def __post_init__(self):
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or not 1 <= self.workers <= 1024:
            raise InputError(f"--workers: expected an integer in [1, 1024], got {self.workers!r}")
        if not all(math.isfinite(t) and t > 0 for t in (self.timeout_s, self.start_timeout_s,
                                                         self.connect_timeout_s)):
            raise InputError("worker timeouts must be positive numbers of seconds")


def require_ray():
    """The ray module, or InputError saying how to install it."""
    try:
        import ray  # the optional extra: imported only here and where it runs (_Host)
    except ImportError:
        raise InputError(f"--workers needs Ray, which is not installed: {RAY_HINT}") from None
    return ray


def connect(spec: WorkerSpec):
    """Ray, initialised: as connected, or joined, or started locally.

    An already connected Ray is used as is; else the cluster at spec.address (InputError if nothing answers there
    within connect_timeout_s), else a new local Ray with spec.workers CPUs.
    """
    ray = require_ray()
    if spec.address is not None:
        probe(spec.address, spec.connect_timeout_s)
    if ray.is_initialized():
        return ray
    try:
        return start(spec.address, spec.workers)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = spec.address or "a local Ray"
        raise InputError(f"cannot start or join {where}: {' '.join(str(e).split())[:300]}") from None


def start(address: str | None = None, num_cpus: int | None = None):
    """Quiet ray.init: join `address`, or start a local Ray.

    A local Ray gets `num_cpus` CPUs.

    No dashboard; the workers' output is not forwarded.
    """
    ray = require_ray()
    local = {} if address is not None else {"num_cpus": num_cpus}
    with warnings.catch_warnings():  # Ray's daemons are exec'd right after the fork: JAX's threads are no risk
        warnings.filterwarnings("ignore", "os.fork", RuntimeWarning)
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                 **local)
    return ray


def probe(address: str, timeout: float) -> None:
    """InputError unless `address` accepts TCP within `timeout` seconds.

    "auto" is not probed: Ray finds the local cluster itself.
    """
    if address == "auto":
        return
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"--ray-address: expected HOST:PORT, ray://HOST:PORT or auto, got {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        reason = "timed out" if isinstance(e, socket.timeout) else (e.strerror or str(e))
        raise InputError(f"--ray-address {address}: no Ray head answers there ({reason} after at most "
                         f"{timeout:g} s); start one with `ray start --head`") from None


class _Host:
    """The Ray actor: one rollout worker, built from data.

    Ray restarts it from the same data.
    """

    def __init__(self, kind: str, payload: list):
        """Keep the payload's object ref; the worker is built from it.

        payload: [object ref of (config, pairs)], nested so that Ray passes the ref, not the data: the actor's
        creation stays small, and a restart fetches the data again from the pool that holds it.
        """
        import ray  # the optional extra, only where it runs: this is a Ray actor

        self.worker = make_worker(kind, ray.get(payload[0]))

    def pid(self) -> int:
        return os.getpid()

    def run(self, params, args: tuple, lo: int, hi: int):
        return self.worker.run(params, *args, lo, hi)


class RayPool:
    """spec.workers Ray actors serving one run's tasks.

    `run` splits a batch across them (see the module docstring).

    Close it (or use it as a context manager) to end the actors.
    """

    def __init__(self, spec: WorkerSpec, kind: str, payload: tuple):
        ray = connect(spec)
        cpus = ray.cluster_resources().get("CPU", 0)
        if cpus < spec.workers:
            raise InputError(f"--workers {spec.workers}: the Ray cluster has {cpus:g} CPUs (a worker takes one)")
        self.spec, self.ray, self.workers = spec, ray, spec.workers
        actor = ray.remote(_Host).options(num_cpus=1, max_restarts=spec.max_restarts,
                                          max_task_retries=spec.max_restarts)
        self.payload = ray.put(payload)  # held while the pool lives: a restarted actor is rebuilt from it
        self.actors = [actor.remote(kind, [self.payload]) for _ in range(spec.workers)]
        try:
            self.started_pids = self.pids(spec.start_timeout_s, "the workers' start")
        except BaseException:
            self.close()
            raise

    def pids(self, timeout: float | None = None, what: str = "process ids") -> list[int]:
        """Process id of every actor, once each has finished its queued work.

        A restarted actor has a new one.
        """
        return self._get([a.pid.remote() for a in self.actors], timeout or self.spec.timeout_s, what)

    def run(self, params, args: tuple, total: int) -> list:
        """The shares of a batch, in order: worker.run(params, *args, lo, hi) per range.

        The ranges: partition(total, workers).
        """
        return self._get(self.submit(params, args, total), self.spec.timeout_s, "rollouts")

    def submit(self, params, args: tuple, total: int) -> list:
        """The object refs of `run`'s shares.

        The parameters go to the object store once.
        """
        import jax  # here: the CLI's parser imports this module, and jax costs seconds of start-up

        ref = self.ray.put(jax.device_get(params))
        return [a.run.remote(ref, args, lo, hi) for a, (lo, hi) in zip(self.actors, partition(total, self.workers))]

    def _get(self, refs: list, timeout: float, what: str) -> list:
        exc = self.ray.exceptions
        try:
            return self.ray.get(refs, timeout=timeout)
        except exc.GetTimeoutError:
            raise WorkerError(f"Ray workers: {what} took more than {timeout:g} s (--worker-timeout); a run keeps "
                              f"its last checkpoint, rerun to resume") from None
        except exc.RayActorError as e:
            raise WorkerError(f"Ray workers: a worker died more than {self.spec.max_restarts} times during "
                              f"{what} ({' '.join(str(e).split())[:200]})") from None

    def close(self) -> None:
        for a in getattr(self, "actors", []):
            self.ray.kill(a, no_restart=True)
        self.actors = []

    def __enter__(self) -> "RayPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_pool(workers: WorkerSpec | None, kind: str, config, pairs: Sequence[tuple]):
    """A context manager giving a RayPool of `kind` workers, ended on exit.

    The workers serve the (graph, cluster) pairs (placeto.rollouts.workers.make_worker; `kind`: the worker class's
    "module:Class" path). Without `workers`, it gives None (rollouts stay in this process).
    """
    if workers is None:
        return contextlib.nullcontext()
    return RayPool(workers, kind, (config, list(pairs)))


def map_ordered(spec: WorkerSpec, fn: Callable[..., Any], items: Sequence[tuple],
                on_result: Callable[[int, Any], None] | None = None) -> list:
    """[fn(*item) for item in items], each item a Ray task.

    Results come in the order of `items`.

    Each task takes one CPU and is retried up to spec.max_restarts times if its process dies; at most spec.workers
    run at once. on_result(index, result) is called as each finishes. fn must be a module-level function (Ray
    imports it by name).
    """
    ray = connect(spec)
    remote = ray.remote(fn).options(num_cpus=1, max_retries=spec.max_restarts)
    results: list[Any] = [None] * len(items)
    index: dict[Any, int] = {}  # object ref -> item index, for the tasks in flight
    todo = iter(range(len(items)))
    try:
        for k in itertools.islice(todo, spec.workers):
            index[remote.remote(*items[k])] = k
        while index:
            ready, _ = ray.wait(list(index), num_returns=1, timeout=spec.timeout_s)
            if not ready:
                raise WorkerError(f"Ray workers: no task finished within {spec.timeout_s:g} s (--worker-timeout)")
            k = index.pop(ready[0])
            try:
                results[k] = ray.get(ready[0])
            except ray.exceptions.WorkerCrashedError as e:
                raise WorkerError(f"Ray workers: a task's process died {spec.max_restarts + 1} times "
                                  f"({' '.join(str(e).split())[:200]})") from None
            if on_result is not None:
                on_result(k, results[k])
            for k in itertools.islice(todo, 1):
                index[remote.remote(*items[k])] = k
    finally:
        for ref in index:
            ray.cancel(ref, force=True)
    return results
