"""Every field of every file format the project writes, mutated one at a time: reading the file gives
a valid object or an InputError of one line, never another exception.

The formats: graph (with every meta key other modules read: program, source, grouping, expert_placement,
profile), placement, cluster (also as `place --hardware`'s calibration cache entry), the profile cache entry, a
run's config.json (placeto, gdp, rnn, hierarchical) and checkpoint.msgpack (placeto, gdp, per-graph). The valid
examples come from the project's own writers and the fields mutated are found by walking them (`field_paths`),
so a field a writer adds is mutated too. Each format gets a sweep (every field x every value of `WRONG`: another
type, out of range, huge, deleted) and a hypothesis test (any field x arbitrary scalars). After a successful
read the object is used once, cheaply (a graph and a placement simulated, a cluster checked against devices), so
a value that only fails when used is caught as well.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.model.errors import InputError

DELETE = object()  # the mutation that removes the field
WRONG = [None, True, 0, -1, 1.5, -1e308, 1e308, 2**63, 10**400, float("nan"), float("inf"), "", "x" * 10_000, [],
         [None], {}, {"x": 1}, [0] * 5_000, "12", [[1, 2]], DELETE]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                    st.lists(st.integers(-3, 3), max_size=3),
                    st.dictionaries(st.text(max_size=4), st.integers(-3, 3), max_size=2))
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


# ---- walking and mutating a JSON (or msgpack) value ------------------------------------------------------------
def field_paths(obj: Any, path: tuple = (), lists: int = 2) -> list[tuple]:
    """Every path to a value inside `obj` (dict keys; the first `lists` entries of each list), containers
    included, the root excluded."""
    out = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj[:lists]) if isinstance(obj, list) else ()
    for key, value in items:
        out.append(path + (key,))
        out += field_paths(value, path + (key,), lists)
    return out


def mutated(obj: Any, path: tuple, value: Any) -> Any:
    """A deep copy of `obj` with the value at `path` replaced by `value` (DELETE: removed)."""
    new = copy.deepcopy(obj)
    parent = new
    for key in path[:-1]:
        parent = parent[key]
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = copy.deepcopy(value)
    return new


def one_line_or_valid(read: Callable[[], Any], use: Callable[[Any], Any] = lambda x: x) -> None:
    """`use(read())` returns, or raises an InputError whose message is one line; anything else propagates."""
    try:
        use(read())
    except InputError as e:
        assert str(e) and "\n" not in str(e), repr(e)


def sweep(paths: list[tuple], check: Callable[[tuple, Any], None], values: list = WRONG) -> None:
    """`check(path, value)` for every path and every value (WRONG); fails listing the failures (field, value,
    exception), so one run shows every field that still breaks."""
    failures = []
    for path in paths:
        for value in values:
            try:
                check(path, value)
            except Exception as e:  # noqa: BLE001  (what the test is for)
                failures.append(f"{path} = {'(deleted)' if value is DELETE else repr(value)[:40]}: "
                                f"{type(e).__name__}: {str(e)[:160]}")
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:25])


def _json(obj: Any) -> Any:
    """`obj` through JSON text, NaN and Infinity as Python writes them (what a hand-edited file may hold)."""
    return json.loads(json.dumps(obj))


# ---- graph files --------------------------------------------------------------------------------------------------
def graph_example() -> dict:
    """A 4-node graph as simulator.model.io writes it, its meta holding every key other modules read."""
    from simulator.model.io import graph_from_dict, graph_to_dict
    from simulator.model.meta import PROFILE_FIELDS

    profile = {k: ("x" if t == "text" else 2 if t == "count" else 1.5) for k, t in PROFILE_FIELDS.items()}
    nodes = [{"name": n, "op": "dot", "cost": {"k80": 10.0 + i, "local-cpu": 20.0 + i},
              "out_bytes": [1000 * (i + 1)], "persistent_bytes": 64, "colocation": "v" if i == 0 else None,
              "attrs": {"flops": 100}} for i, n in enumerate("abcd")]
    meta = {"program": {"kind": "mlp", "kwargs": {"seed": 1, "depth": 2, "taper": 0.5, "layer_norm": True}},
            "source": {"function": "m:f", "args_spec": "[]"}, "grouping": {"op_to_group": [0, 1, 2, 3, 3]},
            "expert_placement": {"2": [0, 1, 0, 1]}, "profile": {"local-cpu": profile}}
    edges = [{"src": "a", "dst": "b", "out": 0}, {"src": "a", "dst": "c", "out": 0},
             {"src": "b", "dst": "d", "out": 0}, {"src": "c", "dst": "d", "out": 0}]
    d = {"format": "placeto-graph", "version": 1, "name": "g", "meta": meta, "nodes": nodes, "edges": edges}
    return _json(graph_to_dict(graph_from_dict(d)))  # as written: a field the writer adds is in it


GRAPH = graph_example()


def read_graph(d: Any):
    from simulator.model.io import graph_from_dict

    return graph_from_dict(_json(d), "g.json")


def use_graph(graph) -> None:
    """What commands do with a graph before any long work: simulate it, check the zoo program its meta names, read
    its profiles (simulator.measure.graph_profile.stale, as `place --hardware` does; simulator.workloads.families.carry_measured, as a
    rebuild does) and place it with its expert placement."""
    from simulator.measure import cache, graph_profile
    from placeto.baselines import run_method
    from simulator.workloads.families import carry_measured
    from simulator.workloads.zoo.registry import check_program_args
    from simulator import simulate
    from simulator.model.cluster import cluster_preset

    cluster = cluster_preset("placeto-k80", 2)
    simulate(graph, np.zeros(graph.n_nodes, np.int32), cluster)
    program = graph.meta.get("program")
    if program is not None:
        check_program_args(program["kind"], program.get("kwargs", {}), "meta.program")
    key = cache.ProfileKey("0" * 64, "local-cpu", "cpu", "host", "0.0")
    for how in (graph.meta.get("profile") or {}).values():
        graph_profile.stale(how, key)
    carry_measured(graph, graph)
    run_method("expert", graph, cluster)  # NotApplicable without one for 2 devices: an InputError


def check_graph(path: tuple, value: Any) -> None:
    one_line_or_valid(lambda: read_graph(mutated(GRAPH, path, value)), use_graph)


def test_the_examples_are_valid(tmp_path):
    """Unmutated, every example reads and is used without an error."""
    from placeto.checkpoint_io import read_config
    from simulator.measure.cache import check_cached_cluster
    from simulator.model.cluster import cluster_from_dict
    from simulator.model.placement_file import placement_from_dict

    graph = read_graph(GRAPH)
    use_graph(graph)
    assert {"program", "source", "grouping", "expert_placement", "profile"} <= set(GRAPH["meta"])
    for example in PLACEMENTS:
        assert placement_from_dict(example, graph, 2).assignment.tolist() == [0, 1, 0, 1]
    assert {"graph", "cluster"} <= set(PLACEMENT_V2)
    check_cached_cluster(cluster_from_dict(CLUSTER), [_HostCPU(), _HostCPU()])
    for method, (cls, example) in CONFIGS.items():
        (tmp_path / "config.json").write_text(json.dumps(example))
        assert isinstance(read_config(tmp_path, cls), cls)
    for name, (write, read) in CHECKPOINTS.items():
        write(tmp_path)
        assert read(tmp_path) is not None, name


def test_graph_every_field():
    sweep(field_paths(GRAPH), check_graph)


@SETTINGS
@given(path=st.sampled_from(field_paths(GRAPH)), value=SCALARS)
def test_graph_fields_property(path, value):
    check_graph(path, value)


# ---- placement files ----------------------------------------------------------------------------------------------
PLACEMENT = {"devices": ["/gpu:0", "/gpu:1"], "placement": [0, 1, 0, 1]}  # version 1: no fingerprint
PLACEMENT_BY_NAME = {"devices": ["/gpu:0", "/gpu:1"], "placement": {"a": 0, "b": 1, "c": 0, "d": 1}}


def placement_example() -> dict:
    """A version-2 placement file as the commands write it: the graph's and the cluster's fingerprint in it."""
    from simulator.model.cluster import cluster_preset
    from simulator.model.placement_file import placement_dict

    cluster = cluster_preset("h100-nvlink", 2)
    return _json(placement_dict([0, 1, 0, 1], cluster.device_names, read_graph(GRAPH), cluster))


PLACEMENT_V2 = placement_example()
PLACEMENTS = [PLACEMENT, PLACEMENT_BY_NAME, PLACEMENT_V2]


def check_placement(example: dict, path: tuple, value: Any) -> None:
    from simulator import simulate
    from simulator.model.cluster import cluster_preset
    from simulator.model.placement_file import placement_from_dict

    graph = read_graph(GRAPH)
    placement = mutated(example, path, value) if path else example
    one_line_or_valid(lambda: placement_from_dict(_json(placement), graph, 2, "p.json"),
                      lambda p: simulate(graph, p.assignment, p.made_for.cluster.cluster if p.made_for.cluster
                                         else cluster_preset("placeto-k80", 2)))


def test_placement_every_field():
    for example in PLACEMENTS:
        sweep(field_paths(example), lambda path, value: check_placement(example, path, value))


@SETTINGS
@given(example=st.sampled_from(PLACEMENTS), data=st.data())
def test_placement_fields_property(example, data):
    check_placement(example, data.draw(st.sampled_from(field_paths(example))), data.draw(SCALARS))


# ---- cluster files and the calibration cache entry --------------------------------------------------------------
def cluster_example() -> dict:
    from simulator.model.cluster import Cluster, Device, Host

    devices = tuple(Device(f"/cpu:{i}", "local-cpu", 1e9, "h") for i in range(2))
    return _json(Cluster("c", devices, 5.0, 20.0, 7000.0, latency_us=3.0, hosts=(Host("h", 4.0, 6.0),)).to_dict())


CLUSTER = cluster_example()


class _HostCPU:
    """A JAX host CPU device, as simulator.hardware.devices.kind_of reads one."""

    platform, device_kind = "cpu", "cpu"


def check_cluster(path: tuple, value: Any) -> None:
    """A cluster file, and the same file as `place --hardware`'s calibration cache entry (a stale one, of other
    devices, is refused like a damaged one: simulator.measure.cache.check_cached_cluster)."""
    from simulator.measure.cache import check_cached_cluster
    from simulator import simulate
    from simulator.model.cluster import cluster_from_dict

    graph = read_graph(GRAPH)

    def use(cluster):
        simulate(graph, np.arange(graph.n_nodes, dtype=np.int32) % cluster.n_devices, cluster)
        check_cached_cluster(cluster, [_HostCPU(), _HostCPU()])

    one_line_or_valid(lambda: cluster_from_dict(_json(mutated(CLUSTER, path, value)), "c.json"), use)


def test_cluster_every_field():
    sweep(field_paths(CLUSTER), check_cluster)


@SETTINGS
@given(path=st.sampled_from(field_paths(CLUSTER)), value=SCALARS)
def test_cluster_fields_property(path, value):
    check_cluster(path, value)


# ---- the profile cache entry (simulator.measure.cache) ---------------------------------------------------------------
@pytest.fixture(scope="module")
def profile_entry(tmp_path_factory):
    """(the entry's path, its valid JSON, a reader): a damaged entry must read as None with one warning line."""
    from simulator.measure import cache

    mp = pytest.MonkeyPatch()
    mp.setenv("PLACETO_CACHE", str(tmp_path_factory.mktemp("cache")))
    graph = read_graph(GRAPH)
    key = cache.ProfileKey("0" * 64, "local-cpu", "cpu", "host", "0.0")
    path = cache.write_profile(key, graph)
    entry = json.loads(path.read_text())

    def read(text: str) -> None:
        path.write_text(text)
        warnings: list[str] = []
        found = cache.read_profile(key, graph, warn=warnings.append)
        assert (found is None) == bool(warnings) and all("\n" not in w for w in warnings), warnings
        if found is not None:
            use_graph(cache.with_profile(graph, key.kind, found))

    yield entry, read
    mp.undo()


def test_profile_cache_entry_every_field(profile_entry):
    entry, read = profile_entry
    sweep(field_paths(entry), lambda path, value: read(json.dumps(mutated(entry, path, value))))


# ---- run directories: config.json -----------------------------------------------------------------------------------
def _configs() -> dict[str, tuple[type, dict]]:
    """method -> (its config class, its config.json as its writer writes it, with "method")."""
    from placeto.methods.gdp.config import GdpConfig
    from placeto.methods.sequence.specs import get_spec
    from placeto.methods.placeto.config import PlacetoConfig

    classes = {"placeto": PlacetoConfig, "gdp": GdpConfig, "rnn": get_spec("rnn").config_cls,
               "hierarchical": get_spec("hierarchical").config_cls}
    return {name: (cls, {**json.loads(cls().to_json()), "method": name}) for name, cls in classes.items()}


CONFIGS = _configs()


def check_config(method: str, path: tuple, value: Any, run: Path) -> None:
    """config.json as its readers take it: the method's config class (types and ranges) and the registry's
    "method" (once a TypeError: unhashable type)."""
    from placeto.checkpoint_io import read_config
    from placeto.methods import registry

    cls, example = CONFIGS[method]
    (run / "config.json").write_text(json.dumps(mutated(example, path, value)))
    one_line_or_valid(lambda: read_config(run, cls))
    one_line_or_valid(lambda: registry.run_method(run))


def test_run_config_every_field(tmp_path):
    for method, (_, example) in CONFIGS.items():
        sweep(field_paths(example), lambda path, value: check_config(method, path, value, tmp_path))


@SETTINGS
@given(method=st.sampled_from(sorted(CONFIGS)), data=st.data())
def test_run_config_fields_property(method, data, tmp_path_factory):
    check_config(method, data.draw(st.sampled_from(field_paths(CONFIGS[method][1]))), data.draw(SCALARS),
                 tmp_path_factory.mktemp("run"))


# ---- run directories: checkpoint.msgpack ----------------------------------------------------------------------------
PARAMS = {"dense": {"kernel": np.ones((2, 3), np.float32), "bias": np.zeros(3, np.float32)}}
LEAVES = [np.zeros((5, 5), np.float32), np.array([np.nan], np.float32), np.zeros(3, np.int32), b"\x00\x01"]


def _checkpoints() -> dict[str, tuple[Callable[[Path], None], Callable[[Path], Any]]]:
    """method -> (write(run_dir), read(run_dir)): its checkpoint writer and the reader a resumed run calls, on a
    small parameter tree."""
    import jax

    from placeto.methods.sequence import rundir
    from placeto.methods.gdp import train as gdp_train
    from placeto.methods.placeto import train as placeto_train
    from placeto.methods.placeto.gradient import Baseline as Returns
    from placeto.methods.sequence.reinforce import Baseline

    opt = {"mu": copy.deepcopy(PARAMS), "count": np.zeros((), np.int32)}
    gdp = gdp_train.RunState(PARAMS, opt, 3, 48, {"g@2d": 12.5})
    task = {"graph": "g", "nodes": 4, "devices": 2}
    per_graph = rundir.RunState(PARAMS, opt, Baseline(-1.5, 3), 3, 48, 12.5)
    placeto = placeto_train.TrainState(PARAMS, opt, {"g": Returns(np.zeros((2, 4), np.float32), np.int64(3))},
                                       jax.random.key(0), 8, 2, 100, {"g@2d": 12.5})
    fresh = placeto_train.TrainState(PARAMS, opt, {}, jax.random.key(1))
    return {"gdp": (lambda d: gdp_train._save(d, gdp), lambda d: gdp_train._load(d, gdp._replace(update=0))),
            "per-graph": (lambda d: rundir._save(d, per_graph, task), lambda d: rundir._load(d, per_graph, task)),
            "placeto": (lambda d: placeto_train.save_checkpoint(d, placeto),
                        lambda d: placeto_train.load_checkpoint(d, fresh))}


CHECKPOINTS = _checkpoints()


def check_checkpoint(name: str, path: tuple, value: Any, run: Path) -> None:
    """A checkpoint as resuming training reads it (gdp's update, samples and best once raised ValueError,
    TypeError or OverflowError)."""
    from flax import serialization

    write, read = CHECKPOINTS[name]
    write(run)
    blob = serialization.msgpack_restore((run / "checkpoint.msgpack").read_bytes())
    try:
        raw = serialization.msgpack_serialize(mutated(blob, path, value))
    except (TypeError, ValueError, OverflowError):  # msgpack cannot hold it (10**400): no file can
        return
    (run / "checkpoint.msgpack").write_bytes(raw)
    one_line_or_valid(lambda: read(run))


def test_placeto_checkpoint_baseline_that_is_not_a_map(tmp_path):
    from flax import serialization

    write, read = CHECKPOINTS["placeto"]
    write(tmp_path)
    blob = serialization.msgpack_restore((tmp_path / "checkpoint.msgpack").read_bytes())
    blob["baselines"]["g"] = np.zeros(3, np.int32)  # an array, not a map: an IndexError before, now one line
    (tmp_path / "checkpoint.msgpack").write_bytes(serialization.msgpack_serialize(blob))
    one_line_or_valid(lambda: read(tmp_path))


def _checkpoint_paths(name: str, tmp: Path) -> list[tuple]:
    from flax import serialization

    CHECKPOINTS[name][0](tmp)
    return field_paths(serialization.msgpack_restore((tmp / "checkpoint.msgpack").read_bytes()))


def test_checkpoint_every_field(tmp_path):
    for name in CHECKPOINTS:
        paths = _checkpoint_paths(name, tmp_path)
        # WRONG, and parameter leaves of another shape, NaN, another dtype, bytes
        sweep(paths, lambda path, value: check_checkpoint(name, path, value, tmp_path), WRONG + LEAVES)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@SETTINGS
@given(name=st.sampled_from(sorted(CHECKPOINTS)), data=st.data())
def test_checkpoint_fields_property(name, data, tmp_path_factory):
    run = tmp_path_factory.mktemp("ckpt")
    path = data.draw(st.sampled_from(_checkpoint_paths(name, run)))
    check_checkpoint(name, path, data.draw(st.one_of(SCALARS, st.sampled_from(LEAVES))), run)
