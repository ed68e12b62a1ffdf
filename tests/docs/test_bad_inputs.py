"""Every class of bad input through the CLI: exit status 2, exactly one line on stderr, no traceback,
no pre-existing file changed, and no code imported because a data file named it.

The cases run in one driver process (tests/docs/cli_driver.py) that forks a child per command line, so the imports
are paid once; `test_the_driver_matches_the_real_entry_point` runs a few of them as plain `python -m placeto.cli.main`
subprocesses to show the two agree. Files are tiny (a 4-node graph), train cases use the `tiny` preset.
"""

from __future__ import annotations

import gzip
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

# its module fixtures are costly: `make test` (--dist loadgroup) runs the whole module on one worker, so they run once
pytestmark = pytest.mark.xdist_group("test_bad_inputs")

HERE = Path(__file__).resolve().parent
BIG = "9" * 5000  # a 5,000-digit integer
GRAPH = {"format": "placeto-graph", "version": 1, "name": "g", "meta": {},
         "nodes": [{"name": "a", "op": "x", "cost": 10, "out_bytes": [1000]},
                   {"name": "b", "op": "x", "cost": 20, "out_bytes": [2000]},
                   {"name": "c", "op": "x", "cost": 5, "out_bytes": [500]},
                   {"name": "d", "op": "x", "cost": 1, "out_bytes": []}],
         "edges": [{"src": "a", "dst": "b"}, {"src": "a", "dst": "c"}, {"src": "b", "dst": "d"},
                   {"src": "c", "dst": "d"}]}
CLUSTER = {"format": "placeto-cluster", "version": 1, "name": "c", "delta1_us": 5.7, "delta2_us": 25.0,
           "bandwidth_bytes_per_us": 7600.0,
           "devices": [{"name": f"/gpu:{i}", "kind": "k80", "memory_bytes": 12e9} for i in range(2)]}
PLACEMENT = {"devices": ["/gpu:0", "/gpu:1"], "placement": [0, 1, 0, 1]}


def _graph(node=None, edge=None, **top):
    """GRAPH with node 'a' updated by `node`, edge 0 by `edge`, and top-level fields replaced by `top`."""
    g = json.loads(json.dumps(GRAPH))
    g["nodes"][0].update(node or {})
    g["edges"][0].update(edge or {})
    g.update(top)
    return g


def _cluster(device=None, **top):
    c = json.loads(json.dumps(CLUSTER))
    c["devices"][0].update(device or {})
    c.update(top)
    return c


# name -> JSON object (or raw bytes): every file the cases read
JSON_FILES = {
    "g.json": GRAPH, "p.json": PLACEMENT, "c.json": CLUSTER,
    "cost_1e308.json": _graph({"cost": 1e308}), "cost_inf.json": _graph({"cost": float("inf")}),
    "cost_nan.json": _graph({"cost": float("nan")}), "cost_neg.json": _graph({"cost": -1}),
    "cost_str.json": _graph({"cost": "10"}), "cost_kind_huge.json": _graph({"cost": {"k80": 1e13}}),
    "bytes_huge.json": _graph({"out_bytes": [1e19]}), "persistent_neg.json": _graph({"persistent_bytes": -5}),
    "out_2_63.json": _graph(edge={"out": 2**63}), "out_2_32.json": _graph(edge={"out": 2**32}),
    "out_neg.json": _graph(edge={"out": -1}), "out_str.json": _graph(edge={"out": "0"}),
    "toplist.json": [], "format.json": _graph(format="other"), "version.json": _graph(version=99),
    "nodes_obj.json": _graph(nodes={}), "node_int.json": _graph(nodes=[5]),
    "cycle.json": _graph(edges=GRAPH["edges"] + [{"src": "d", "dst": "a"}]),
    "dupname.json": _graph(nodes=GRAPH["nodes"] + [GRAPH["nodes"][0]]),
    "unknown_edge.json": _graph(edge={"src": "zz"}),
    "grouping_bad.json": _graph(meta={"grouping": {"op_to_group": ["x"]}}),
    "bound.json": _graph({"out_bytes": [1e18]}),
    "meta_kind.json": _graph(meta={"program": {"kind": "nope", "kwargs": {}}}),
    "meta_kwargs.json": _graph(meta={"program": {"kind": "nmt", "kwargs": {"layers": 10**9}}}),
    "meta_kwargs_code.json": _graph(meta={"program": {"kind": "nmt", "kwargs": {"optimizer": "os:fork"}}}),
    "meta_code.json": _graph(meta={"source": {"function": "evil:step", "args_spec": "evil:example_args"}}),
    "meta_atfile.json": _graph(meta={"source": {"function": "evil:step", "args_spec": "@/etc/hostname"}}),
    "expert_int.json": _graph(meta={"expert_placement": 5}),
    "expert_str.json": _graph(meta={"expert_placement": "12"}),
    "expert_list.json": _graph(meta={"expert_placement": [[0, 1, 0, 1]]}),
    "expert_entry.json": _graph(meta={"expert_placement": {"2": 7}}),
    "p_devices_int.json": {"devices": 5, "placement": [0, 1, 0, 1]},
    "p_huge.json": {"devices": [], "placement": [0, 2**70, 0, 1]},
    "p_str.json": {"placement": [0, "1", 0, 1]}, "p_short.json": {"placement": [0, 1]},
    "p_range.json": {"placement": [0, 5, 0, 1]}, "p_neg.json": {"placement": [0, -1, 0, 1]},
    "p_unknown.json": {"placement": {"zz": 0}}, "p_devname.json": {"devices": [1, 2], "placement": [0, 1, 0, 1]},
    "c_mem_neg.json": _cluster({"memory_bytes": -1}), "c_mem_nan.json": _cluster({"memory_bytes": float("nan")}),
    "c_mem_str.json": _cluster({"memory_bytes": "12"}), "c_mem_huge.json": _cluster({"memory_bytes": 1e300}),
    "c_d1_huge.json": _cluster(delta1_us=1e308), "c_d2_inf.json": _cluster(delta2_us=float("inf")),
    "c_bw_tiny.json": _cluster(bandwidth_bytes_per_us=1e-320), "c_bw_zero.json": _cluster(bandwidth_bytes_per_us=0),
    "c_nodev.json": _cluster(devices=[]), "c_devs_int.json": _cluster(devices=3),
    "c_dev_nokind.json": _cluster(devices=[{"name": "/gpu:0", "memory_bytes": 1e9}]),
    "c_many.json": _cluster(devices=[{"name": f"/d:{i}", "kind": "k80", "memory_bytes": 1e9} for i in range(2000)]),
    "c_name_int.json": _cluster(name=7), "c_dupdev.json": _cluster({"name": "/gpu:1"}),
    "c_slow.json": _cluster(bandwidth_bytes_per_us=1e-3),
    # the optional latency and hosts (simulator.model.cluster)
    "c_lat_neg.json": _cluster(latency_us=-5), "c_lat_inf.json": _cluster(latency_us=float("inf")),
    "c_hosts_obj.json": _cluster(hosts={"h": 1}),
    "c_host_nan.json": _cluster({"host": "h"}, hosts=[{"name": "h", "dispatch_us": float("nan")}]),
    "c_host_unknown.json": _cluster({"host": "zz"}, hosts=[{"name": "h"}]),
    "c_host_missing.json": _cluster({"host": "h"}, hosts=[{"name": "h", "transfer_us": 40}]),
    # metadata read back: profiles, groupings, zoo programs too large to build, no nodes
    "prof_list.json": _graph(meta={"profile": [1]}), "prof_str.json": _graph(meta={"profile": "x"}),
    "prof_entry_list.json": _graph(meta={"profile": {"default": [1]}}),
    "prof_cores_str.json": _graph(meta={"profile": {"default": {"cores": "4"}}}),
    "prof_kind_missing.json": _graph(meta={"profile": {"local-cpu": {"method": "step"}}}),
    "otg_empty.json": _graph(meta={"grouping": {"op_to_group": []}}),
    "otg_zero.json": _graph(meta={"grouping": {"op_to_group": [0, 0, 0, 0, 0]}}),
    "meta_huge_width.json": _graph(meta={"program": {"kind": "nmt", "kwargs": {"hidden": 65536}}}),
    "meta_huge_depth.json": _graph(meta={"program": {"kind": "nmt", "kwargs": {"layers": 60000}}}),
    "meta_huge_taper.json": _graph(meta={"program": {"kind": "mlp", "kwargs": {"taper": 3.0, "depth": 12}}}),
    "meta_huge_float.json": _graph(meta={"program": {"kind": "mlp", "kwargs": {"taper": 10**400}}}),
    "no_nodes.json": _graph(nodes=[], edges=[]),
    "keep.json": GRAPH,  # a valid file a failing import-jax must leave as it is
}
RAW_FILES = {
    "cost_digits.json": json.dumps(_graph({"cost": 1})).replace('"cost": 1,', f'"cost": {BIG},', 1).encode(),
    "corrupt.json.gz": gzip.compress(json.dumps(GRAPH).encode())[:30] + b"\x00garbage" * 8,
    "truncated.json.gz": gzip.compress(json.dumps(GRAPH).encode())[:-20],
    "nested.json": b"[" * 100_000 + b"]" * 100_000, "notjson.json": b'{"format": ', "empty.json": b"",
    "binary.json": bytes(range(256)) * 4, "p_nested.json": b"{" * 50_000,
    # the user's own code for import-jax (importable from the working directory, as `python -m` would)
    "usercode.py": b"import jax.numpy as jnp\n"
                   b"def ok(a, b):\n    return a @ b\n"
                   b"def raises(a, b):\n    raise RuntimeError('boom in user code')\n"
                   b"def shapes(a, b):\n    return a @ jnp.ones((3, 5))\n"
                   b"def identity(a, b):\n    return a\n"
                   b"def factory_raises():\n    raise ValueError('factory failed')\n"
                   b"def factory_takes(x):\n    return (x,)\n",
    "usersyntax.py": b"def f(:\n    pass\n", "userimport.py": b"raise KeyError('at import')\n",
    "evil/evil.py": b"import pathlib\npathlib.Path(__file__).with_name('IMPORTED').write_text('x')\n"
                    b"def step(x):\n    return x\ndef example_args():\n    return ([1.0],)\n",
}


def _build(root: Path) -> None:
    for name, obj in JSON_FILES.items():
        (root / name).write_text(json.dumps(obj))
    for name, data in RAW_FILES.items():
        (root / name).parent.mkdir(exist_ok=True)
        (root / name).write_bytes(data)
    (root / "adir").mkdir()
    _build_runs(root)
    _build_pergraph_runs(root)
    _build_exports(root)


def _build_exports(root: Path) -> None:
    """Damaged exported programs of g.json (simulator.tracing.export), and a directory where an export would go."""
    import io
    import zipfile

    import numpy as np

    from simulator.tracing.export import FORMAT, VERSION, fingerprint
    from simulator.model.io import load_graph

    units = [{"fn": None, "inputs": [], "outputs": [], "values": []} for _ in GRAPH["nodes"]]
    manifest = {"format": FORMAT, "version": VERSION, "graph": "g", "fingerprint": fingerprint(load_graph(
        root / "g.json")), "n_ops": 4, "platforms": ["cpu"], "functions": 0, "units": units, "values": [],
        "outputs": []}
    pickled = io.BytesIO()
    np.save(pickled, np.array([{"code": "x"}], dtype=object), allow_pickle=True)
    bundles = {
        "x_other.zip": {"manifest.json": {**manifest, "fingerprint": "0" * 64}},
        "x_fn.zip": {"manifest.json": {**manifest, "functions": 1, "units": [{**units[0], "fn": 0}] + units[1:]},
                     "fn/0.bin": b"\x00garbage" * 16},
        "x_pickle.zip": {"manifest.json": {**manifest, "units": [{**units[0], "values": [0]}] + units[1:],
                                           "values": [{"op": 0, "kind": "const", "shape": [1], "dtype": "float32"}]},
                         "const/0.npy": pickled.getvalue()},
    }
    for name, members in bundles.items():
        with zipfile.ZipFile(root / name, "w") as z:
            for member, data in members.items():
                z.writestr(member, json.dumps(data) if isinstance(data, dict) else data)
    (root / "x_garbage.zip").write_bytes(b"PK\x03\x04 not really a zip")
    (root / "blocked.export.zip").mkdir()


def _build_runs(root: Path) -> None:
    """Run directories: run_ok (tiny config, max_devices 8, its initial parameters) and broken copies."""
    import jax
    import numpy as np
    from flax import serialization

    from placeto.methods.placeto.config import tiny
    from placeto.features import graph_arrays
    from placeto.methods.placeto.policy import make_policy
    from simulator.model.cluster import cluster_preset
    from simulator.model.generate import layered_dag

    config = tiny(max_devices=8)
    g = layered_dag(8, seed=0)
    arrays = graph_arrays(g, cluster_preset("placeto-k80", 2), np.zeros(g.n_nodes, np.int32), config.max_devices)
    params = make_policy(config).init(jax.random.key(0), arrays)
    blob = serialization.msgpack_serialize({"params": serialization.to_state_dict(params)})
    cfg = json.loads(config.to_json())
    runs = {"run_ok": (cfg, blob), "run_lock": (cfg, blob), "run_empty": (cfg, b""),
            "run_trunc": (cfg, blob[:len(blob) // 2]), "run_garbage": (cfg, b"\xc1" * 64),
            "run_noparams": (cfg, serialization.msgpack_serialize({"x": 1})),
            "run_shape": ({**cfg, "hidden": 32}, blob), "run_cfg_type": ({**cfg, "hidden": "16"}, blob),
            "run_cfg_nan": ({**cfg, "lr": float("nan")}, blob), "run_cfg_list": ([1, 2], blob),
            "run_cfg_text": ("{hidden: 16", blob), "run_nockpt": (cfg, None)}
    runs.update({"run_method_list": ({**cfg, "method": [1]}, blob), "run_method_num": ({**cfg, "method": 5}, blob),
                 "run_method_unknown": ({**cfg, "method": "nope"}, blob)})
    for name, (c, ckpt) in runs.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(c if isinstance(c, str) else json.dumps(c))
        if ckpt is not None:
            (root / name / "checkpoint.msgpack").write_bytes(ckpt)
    _build_gdp_runs(root)


def _build_gdp_runs(root: Path) -> None:
    """gdp run directories (tiny config) whose checkpoint's update, samples or best are malformed: checked before
    the parameters are (which are a stand-in here)."""
    import numpy as np
    from flax import serialization

    from placeto.methods.gdp.config import PRESETS

    cfg = PRESETS["tiny"]().to_json()
    good = {"params": {"w": np.zeros(2, np.float32)}, "opt_state": {}, "update": 3, "samples": 48,
            "best": {"g@2d": 12.5}}
    for name, change in (("update_float", {"update": 1.5}), ("update_neg", {"update": -3}),
                         ("update_str", {"update": "5"}), ("update_huge", {"update": 2**63}),
                         ("samples_list", {"samples": [1]}), ("best_int", {"best": 5}),
                         ("best_str", {"best": {"g@2d": "x"}}), ("best_neg", {"best": {"g@2d": -1.0}})):
        (root / f"run_gdp_{name}").mkdir()
        (root / f"run_gdp_{name}" / "config.json").write_text(cfg)
        (root / f"run_gdp_{name}" / "checkpoint.msgpack").write_bytes(serialization.msgpack_serialize({**good,
                                                                                                     **change}))


def _build_pergraph_runs(root: Path) -> None:
    """rnn run directories (placeto.methods.sequence.rundir): run_rnn_ok (zero parameters of the tiny config, trained on
    g.json at 2 devices), one with a garbage checkpoint, one with a mistyped config field. Nothing is compiled:
    the parameter shapes come from jax.eval_shape."""
    import jax
    import numpy as np
    from flax import serialization

    from placeto.methods.sequence.specs import get_spec
    from simulator.model.cluster import cluster_preset
    from simulator.model.io import load_graph

    spec = get_spec("rnn")
    config = spec.presets["tiny"](devices=2)
    x = spec.make_inputs(load_graph(root / "g.json"), cluster_preset("placeto-k80", 2), config)
    net = spec.make_net(config)
    shapes = jax.eval_shape(lambda: net.init(jax.random.key(0), x, jax.random.key(0), 1, False, method="sample"))
    params = jax.tree.map(lambda a: np.zeros(a.shape, a.dtype), shapes)
    blob = serialization.msgpack_serialize({"params": serialization.to_state_dict(params),
                                            "task": {"graph": "g", "nodes": 4, "devices": 2}})
    cfg = json.loads(config.to_json())
    for name, c, ckpt in (("run_rnn_ok", cfg, blob), ("run_rnn_garbage", cfg, b"\xc1" * 64),
                          ("run_rnn_cfg", {**cfg, "hidden": "16"}, blob)):
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(c))
        (root / name / "checkpoint.msgpack").write_bytes(ckpt)


SIM = "simulate g.json --placement p.json"
SPEC = "'[{\"shape\": [2, 2]}, {\"shape\": [2, 2]}]'"  # import-jax's example arguments (two 2x2 matrices)
TRAIN = "train --graph g.json --config tiny --devices 2"
PLACE = "place g.json --devices 2"
EVAL = "eval g.json --placement p.json"
# (case id, command line, directory whose .lock the driver holds while the case runs)
CASES: list[tuple[str, str, str | None]] = [
    # graph files: numbers (once a SIGSEGV in the numba event loop, or a wrong answer) and malformed files
    *[(f"graph-{n}", f"simulate {n}.json --placement p.json", None) for n in (
        "cost_1e308", "cost_inf", "cost_nan", "cost_neg", "cost_str", "cost_kind_huge", "cost_digits",
        "bytes_huge", "persistent_neg", "out_2_63", "out_2_32", "out_neg", "out_str")],
    *[(f"graph-{n}", f"graph info {n}", None) for n in (
        "corrupt.json.gz", "truncated.json.gz", "nested.json", "notjson.json", "empty.json", "binary.json",
        "toplist.json", "format.json", "version.json", "nodes_obj.json", "node_int.json", "cycle.json",
        "dupname.json", "unknown_edge.json", "grouping_bad.json", "adir", "missing.json")],
    ("graph-time-bound", "simulate bound.json --placement p.json --cluster c_slow.json", None),
    ("graph-eval-cost-1e308", "eval cost_1e308.json --placement p.json", None),
    ("eval-refit-no-hardware", f"{EVAL} p.json p.json p.json p.json p.json --refit new.json", None),
    ("eval-refit-too-few", f"{EVAL} p.json --hardware --refit new.json", None),
    # placements
    *[(f"placement-{n}", f"simulate g.json --placement {n}.json", None) for n in (
        "p_devices_int", "p_huge", "p_str", "p_short", "p_range", "p_neg", "p_unknown", "p_devname", "p_nested")],
    ("placement-eval-devices-int", "eval g.json --placement p_devices_int.json", None),
    ("placement-eval-huge", "eval g.json --placement p_huge.json", None),
    # clusters
    *[(f"cluster-{n}", f"{SIM} --cluster {n}.json", None) for n in (
        "c_mem_neg", "c_mem_nan", "c_mem_str", "c_mem_huge", "c_d1_huge", "c_d2_inf", "c_bw_tiny", "c_bw_zero",
        "c_nodev", "c_devs_int", "c_dev_nokind", "c_many", "c_name_int", "c_dupdev", "c_lat_neg", "c_lat_inf",
        "c_hosts_obj", "c_host_nan", "c_host_unknown", "c_host_missing")],
    ("cluster-json-mem-nan", f"{SIM} --cluster c_mem_nan.json --json", None),
    ("cluster-eval-bw-tiny", f"{EVAL} --cluster c_bw_tiny.json", None),
    # expert placements in a graph's meta (compare: once TypeErrors)
    *[(f"expert-{n}", f"compare {n}.json --methods expert --devices 2 --quiet", None) for n in (
        "expert_int", "expert_str", "expert_list", "expert_entry")],
    # command-line numbers
    *[(f"number-{i}", cmd, None) for i, cmd in enumerate([
        f"{SIM} --devices 0", f"{SIM} --devices 99999999999999999999999", f"{SIM} --devices two",
        f"{SIM} --devices 2000", f"{TRAIN} --out newrun --seed 99999999999999999999999",
        f"{TRAIN} --out newrun --episodes -1", f"{TRAIN} --out newrun --minutes inf",
        f"{TRAIN} --out newrun --minutes nan", f"{TRAIN} --out newrun --set lr=inf",
        f"{TRAIN} --out newrun --set lr=nan", f"{TRAIN} --out newrun --set seed=99999999999999999999999",
        f"{TRAIN} --out newrun --set hidden=0", f"{TRAIN} --out newrun --set max_devices=500",
        f"{TRAIN} --out newrun --set episodes=1e3", f"{TRAIN} --out newrun --devices 9 --set max_devices=8",
        f"{TRAIN} --out newrun --set embed_every=0", f"{TRAIN} --out newrun --set counterfactual_loss=worst",
        f"{TRAIN} --out newrun --set init_placement=best", f"{TRAIN} --out newrun --set move_weight=-1",
        f"{TRAIN} --out newrun --set move_weight=nan",
        f"{TRAIN} --method gdp --out newrun --set baseline=greedy",  # needs a list decoder
        f"{TRAIN} --method gdp --out newrun --set decoder=etf greedy_ties=highest",
        f"{TRAIN} --method gdp --out newrun --set decoder=etf imitation=-1",
        f"{TRAIN} --method gdp --out newrun --set lr=inf", f"{TRAIN} --method gdp --out newrun --set lr=0",
        f"{TRAIN} --method gdp --out newrun --set entropy=inf",
        f"{PLACE} --checkpoint run_ok --out new.json --samples -1",
        f"{PLACE} --checkpoint run_ok --out new.json --seed -1", f"{EVAL} --repeats 0", f"{EVAL} --devices 0",
        "compare g.json --methods single --seed 99999999999999999999999", "compare g.json --budget 0",
        "compare g.json --methods single --devices 5000", "profile g.json --repeats 0",
        "compare g.json --methods single --devices 2,0", f"{TRAIN} --out newrun --devices 2,x",
        # flags of the anytime comparison, policy-guided search, fine-tuning and mixed training
        "compare g.json --methods single --seconds 0", "compare g.json --methods single --seconds nan",
        "compare g.json --methods sa --seconds -1", "compare g.json --methods single --finetune-episodes -1",
        f"{PLACE} --checkpoint run_ok --out new.json --seconds 0",
        f"{PLACE} --checkpoint run_ok --out new.json --seconds inf",
        f"{PLACE} --checkpoint run_ok --out new.json --budget -5",
        f"{PLACE} --checkpoint run_ok --out new.json --finetune-episodes -1",
        f"{PLACE} --checkpoint run_ok --out new.json --method placeto-search",
        f"{PLACE} --checkpoint run_ok --out new.json --method gdp-search --budget 5",  # a Placeto run for gdp
        f"{PLACE} --checkpoint no_such_policy --out new.json",
        f"{TRAIN} --out newrun --devices 2,x", f"{TRAIN} --out newrun --devices 2,0",
        f"{TRAIN} --out newrun --init-from no_such_policy", f"{TRAIN} --out newrun --init-from run_garbage",
        # --set of a gdp run takes GdpConfig's fields
        f"{TRAIN} --method gdp --out newrun --set gamma=0.5", f"{TRAIN} --method gdp --out newrun --set clip=nan",
        f"{TRAIN} --method gdp --out newrun --set samples_per_update=0",
        f"{TRAIN} --method gdp --out newrun --set temperature=0",
        f"{TRAIN} --method gdp --out newrun --set temperature=inf"])],
    # placing and profiling for this machine: --hardware, --candidates, --top, --plot, device lists,
    # profile methods, measured costs
    *[(f"hardware-{i}", cmd, None) for i, cmd in enumerate([
        "place g.json --out new.json --plot p.png", "place g.json --devices cpu:0,cpu:1 --out new.json",
        "place g.json --hardware --candidates nope --out new.json", "place g.json --hardware --top 0 --out new.json",
        "place g.json --hardware --devices gpu:x --out new.json", "place g.json --hardware --out new.json",
        "place g.json --hardware --repeats 0 --out new.json", "profile g.json --method nope",
        "profile g.json --devices 0", "profile g.json --devices tpu", f"{EVAL} --costs step"])],
    # output paths: a directory, under a regular file, in /proc
    *[(f"output-{i}", cmd, None) for i, cmd in enumerate([
        f"{SIM} --gantt adir", f"{SIM} --gantt g.json/x.png", f"{SIM} --gantt /proc/x.png",
        f"{PLACE} --checkpoint run_ok --out adir", f"{PLACE} --checkpoint run_ok --out g.json/x.json",
        f"{PLACE} --checkpoint run_ok --out /proc/p.json", f"{EVAL} --json adir", f"{EVAL} --json /proc/x.json",
        f"{EVAL} --plot g.json/x.png", f"{EVAL} --refit adir", "compare g.json --methods single --devices 2 --out g.json",
        "compare g.json --methods single --devices 2 --out /proc/cmp", f"{TRAIN} --out g.json",
        f"{TRAIN} --out g.json/run", f"{TRAIN} --out /proc/run", "profile meta_kind.json --out adir",
        "calibrate --out adir"])],
    # run directories and checkpoints
    *[(f"checkpoint-{n}", f"{PLACE} --checkpoint {n} --out new.json", None) for n in (
        "run_empty", "run_trunc", "run_garbage", "run_noparams", "run_shape", "run_cfg_type", "run_cfg_nan",
        "run_cfg_list", "run_cfg_text", "run_nockpt", "missing_run")],
    ("checkpoint-place-9-devices", "place g.json --checkpoint run_ok --devices 9 --out new.json", None),
    ("checkpoint-resume-other-model", f"{TRAIN} --out run_ok --set hidden=64", None),
    ("checkpoint-resume-truncated", f"{TRAIN} --out run_trunc", None),
    ("checkpoint-resume-cfg-type", f"{TRAIN} --out run_cfg_type", None),
    ("run-locked", f"{TRAIN} --out run_lock", "run_lock/.lock"),
    # the per-graph methods (rnn, hierarchical): one graph and one device count, their own config fields and run
    # directories, compare rows trained inside the budget
    *[(f"pergraph-{i}", cmd, None) for i, cmd in enumerate([
        f"{TRAIN} --method rnn --out newrun --devices 2,3",
        "train --graph g.json g.json --config tiny --devices 2 --method hierarchical --out newrun",
        f"{TRAIN} --method rnn --out newrun --set groups=4",
        f"{TRAIN} --method hierarchical --out newrun --set groups=0",
        f"{TRAIN} --method hierarchical --out newrun --set devices=3",
        f"{TRAIN} --method rnn --out newrun --set colocate=maybe", f"{TRAIN} --method rnn --out newrun --set lr=nan",
        f"{TRAIN} --method hierarchical --out newrun --set block_prior=-1",
        f"{TRAIN} --method rnn --out newrun --episodes 0", f"{TRAIN} --method rnn --out newrun --init-from run_ok",
        f"{TRAIN} --method rnn --out run_ok", f"{TRAIN} --method hierarchical --out run_rnn_ok",
        f"{TRAIN} --method rnn --out run_rnn_ok --set hidden=32", f"{TRAIN} --method rnn --out g.json/run",
        f"{PLACE} --method rnn --out new.json", f"{PLACE} --method hierarchical --checkpoint run_ok --out new.json",
        f"{PLACE} --checkpoint run_rnn_ok --method hierarchical --out new.json",
        "place g.json --checkpoint run_rnn_ok --devices 3 --out new.json",
        f"{PLACE} --checkpoint run_rnn_ok --finetune-episodes 4 --out new.json",
        f"{PLACE} --checkpoint run_rnn_garbage --out new.json", f"{PLACE} --checkpoint run_rnn_cfg --out new.json",
        f"{PLACE} --method rnn --seconds nan --out new.json",
        "compare g.json --methods rnn,hierarchcal --devices 2", "compare g.json --methods rnn --devices 2 --budget 0",
        "compare g.json --methods hierarchical --devices 2 --seconds -1"])],
    # programs named by data files: never imported (evil.py would write IMPORTED)
    ("code-profile-source", "profile meta_code.json", None),
    ("code-eval-hardware-source", "eval meta_code.json --placement p.json --hardware --mode program "
                                  "--cluster c.json", None),
    ("code-profile-atfile", "profile meta_atfile.json --program jax.numpy:matmul", None),
    ("code-profile-unknown-kind", "profile meta_kind.json", None),
    ("code-profile-kwargs-range", "profile meta_kwargs.json", None),
    ("code-profile-kwargs-name", "profile meta_kwargs_code.json", None),
    # import-jax's flags: (named paths, the critical-path bound, --export), exported programs (damaged,
    # another graph's, a pickled constant), compare --save-placements, place --method for baselines
    *[(f"import-{i}", f"import-jax jax.numpy:matmul --args-spec {SPEC} --out new.json {flags}", None)
      for i, flags in enumerate(["--params '[5]'", "--opt-state '[0].w'", "--max-cp-growth -1",
                                 "--max-cp-growth nan", "--groups 3", "--grouped-out new2.json --max-cp-growth inf",
                                 "--export --out blocked.json"])],
    *[(f"export-{n}", f"{EVAL} --hardware --cluster c.json --exported {n}.zip", None)
      for n in ("x_garbage", "x_other", "x_fn", "x_pickle", "x_missing")],
    ("export-profile-pickle", "profile g.json --out new.json --exported x_pickle.zip", None),
    ("export-profile-two-files", "profile g.json cost_1e308.json --exported x_fn.zip", None),
    ("save-placements-file", "compare g.json --methods single --devices 2 --save-placements g.json", None),
    ("save-placements-proc", "compare g.json --methods single --devices 2 --save-placements /proc/plc", None),
    ("place-baseline-checkpoint", f"{PLACE} --method etf --checkpoint run_ok --out new.json", None),
    ("place-baseline-expert", f"{PLACE} --method expert --out new.json", None),
    ("place-baseline-seconds", f"{PLACE} --method sa --seconds 0 --out new.json", None),
    # the newer features' inputs. --hardware takes the flags other paths check (time limits, run
    # directories), device lists are bounded, metadata read back is validated, run directories' "method" and
    # gdp counters are typed, the user's code fails in one line, and no failing import-jax touches a file
    *[(f"hw41-{i}", f"place g.json --hardware --out new.json {flags}", None) for i, flags in enumerate([
        "--seconds inf", "--seconds 1e300", "--seconds 0", "--seconds -1", "--seconds nan",
        "--checkpoint missing_run", "--checkpoint run_ok", "--budget 5", "--devices cpu:99999", "--devices cpu:¹",
        "--devices 1000", "--devices cpu:0,cpu:4096"])],
    ("hw41-profile-devices", "profile g.json --devices cpu:99999", None),
    ("hw41-train-minutes-0", f"{TRAIN} --out newrun --minutes 0", None),
    *[(f"meta41-{n}", f"graph info {n}.json", None) for n in (
        "prof_list", "prof_str", "prof_entry_list", "prof_cores_str", "prof_kind_missing", "otg_empty", "otg_zero",
        "no_nodes")],
    *[(f"meta41-profile-{n}", f"profile {n}.json", None) for n in (
        "prof_list", "otg_zero", "meta_huge_width", "meta_huge_depth", "meta_huge_taper", "meta_huge_float")],
    *[(f"run41-{n}", f"{PLACE} --checkpoint {n} --out new.json", None) for n in (
        "run_method_list", "run_method_num", "run_method_unknown")],
    ("run41-compare-method-list", "compare g.json --methods placeto --devices 2 --budget 2 --checkpoint "
                                  "run_method_list", None),
    ("run41-train-method-list", f"{TRAIN} --out run_method_list", None),
    ("run41-train-other-method", f"{TRAIN} --method gdp --out run_ok", None),
    ("run41-init-from-gdp", f"{TRAIN} --out newrun --init-from run_gdp_update_float", None),
    *[(f"gdp41-{n}", f"{TRAIN} --method gdp --out run_gdp_{n}", None) for n in (
        "update_float", "update_neg", "update_str", "update_huge", "samples_list", "best_int", "best_str",
        "best_neg")],
    *[(f"user41-{i}", f"import-jax {fn} --args-spec {spec} --out keep.json {flags}", None)
      for i, (fn, spec, flags) in enumerate([
          ("usercode:raises", SPEC, ""), ("usercode:shapes", SPEC, ""), ("usersyntax:f", SPEC, ""),
          ("userimport:f", SPEC, ""), ("usercode:ok", "usercode:factory_raises", ""),
          ("usercode:ok", "usercode:factory_takes", ""), ("usercode:identity", SPEC, ""),
          ("usercode:ok", SPEC, "--grouped-out keep.json"), ("usercode:ok", SPEC, "--grouped-out ./keep.json"),
          ("usercode:ok", SPEC, "--grouped-out new2.json --export --out new2.json.gz")])],
    ("out41-place-over-graph", "place g.json --devices 2 --out g.json", None),
    ("out41-simulate-gantt-over-placement", f"{SIM} --gantt p.json", None),
    ("out41-eval-json-over-placement", f"{EVAL} --json p.json", None),
    # rollouts on Ray workers: counts, an address without workers, a malformed or unreachable address
    *[(f"workers-{i}", cmd, None) for i, cmd in enumerate([
        f"{TRAIN} --out newrun --workers 0", f"{TRAIN} --out newrun --workers -1",
        f"{TRAIN} --out newrun --workers 2 --worker-timeout 0",
        f"{TRAIN} --out newrun --ray-address 127.0.0.1:6379", f"{TRAIN} --out newrun --workers 1 --ray-address nope",
        f"{TRAIN} --out newrun --workers 1 --ray-address 127.0.0.1:1",
        f"{TRAIN} --method gdp --out newrun --workers 2 --ray-address 127.0.0.1:1",
        "compare g.json --methods single --devices 2 --workers 0",
        "compare g.json --methods single --devices 2 --ray-address 127.0.0.1:1"])],
]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad_inputs")
    _build(root)
    return root


def _env(root: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(root / "evil"), "JAX_PLATFORMS": "cpu"}


@pytest.fixture(scope="module")
def results(root) -> dict[str, dict]:
    cases = [{"id": cid, "argv": shlex.split(cmd), "lock": str(root / lock) if lock else None}
             for cid, cmd, lock in CASES]
    proc = subprocess.run([sys.executable, str(HERE / "cli_driver.py"), str(root)], input=json.dumps(cases),
                          capture_output=True, text=True, cwd=root, env=_env(root), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {r["id"]: r for r in json.loads(proc.stdout)}


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2(results, case):
    r = results[case]
    lines = r["stderr"].splitlines()
    assert "Traceback" not in r["stderr"], r["stderr"][-2000:]
    assert r["code"] == 2, (r["code"], r["stderr"][-2000:])
    assert len(lines) == 1 and lines[0].startswith("placeto"), r["stderr"]
    assert r["changed"] == [], r["changed"]


def test_the_messages_name_the_file_and_the_field(results):
    expect = {"graph-cost_1e308": ("cost_1e308.json", "node 'a': field 'cost'"),
              "graph-out_2_32": ("out_2_32.json", "field 'out'"),
              "graph-corrupt.json.gz": ("corrupt.json.gz", "cannot read"),
              "graph-nested.json": ("nested.json", "nested too deeply"),
              "graph-time-bound": ("bound.json and c_slow.json", "simulated times could reach"),
              "cluster-c_mem_nan": ("c_mem_nan.json", "'memory_bytes'"),
              "cluster-c_bw_tiny": ("c_bw_tiny.json", "'bandwidth_bytes_per_us'"),
              "cluster-c_lat_neg": ("c_lat_neg.json", "'latency_us'"),
              "cluster-c_host_nan": ("c_host_nan.json", "host 'h': field 'dispatch_us'"),
              "cluster-c_host_unknown": ("c_host_unknown.json", "field 'host': 'zz'"),
              "cluster-c_host_missing": ("c_host_missing.json", "device '/gpu:1': missing field 'host'"),
              "placement-p_huge": ("p_huge.json", "entry 1"),
              "expert-expert_int": ("expert_int.json", "meta.expert_placement"),
              "checkpoint-run_trunc": ("checkpoint.msgpack", "truncated or corrupt"),
              "checkpoint-run_shape": ("checkpoint.msgpack", "shape"),
              "checkpoint-run_cfg_type": ("config.json", "'hidden'"),
              "checkpoint-place-9-devices": ("run_ok", "at most 8 devices"),
              "checkpoint-resume-other-model": ("config.json", "model fields"),
              "run-locked": ("run_lock", "pid "),
              "code-profile-source": ("meta_code.json", "--program"),
              "code-profile-unknown-kind": ("meta_kind.json", "unknown program kind 'nope'"),
              "output-2": ("/proc/x.png", "cannot write")}
    for case, words in expect.items():
        for word in words:
            assert word in results[case]["stderr"], (case, word, results[case]["stderr"])


def test_import_and_export_messages_name_the_file_and_the_part(results):
    expect = {"import-0": ("--params '[5]'", "no such path"), "import-4": ("--groups", "--grouped-out"),
              "import-6": ("blocked.export.zip", "directory"), "export-x_garbage": ("x_garbage.zip", "zip"),
              "export-x_other": ("x_other.zip", "fingerprint"), "export-x_fn": ("x_fn.zip", "fn/0.bin"),
              "export-x_pickle": ("x_pickle.zip", "const/0.npy"), "export-x_missing": ("x_missing.zip", "no such"),
              "export-profile-pickle": ("x_pickle.zip", "const/0.npy"),
              "save-placements-file": ("g.json", "not a directory"),
              "place-baseline-checkpoint": ("--checkpoint", "baseline 'etf'"),
              "place-baseline-expert": ("expert placement",)}
    for case, words in expect.items():
        for word in words:
            assert word in results[case]["stderr"], (case, word, results[case]["stderr"])


def test_no_data_file_made_us_import_code(root, results):
    assert results["code-profile-source"]["code"] == 2
    assert not (root / "evil" / "IMPORTED").exists()


@pytest.mark.parametrize("cmd", ["graph info corrupt.json.gz", f"{SIM} --cluster c_bw_tiny.json",
                                 f"{TRAIN} --out newrun --seed 99999999999999999999999"])
def test_the_driver_matches_the_real_entry_point(root, results, cmd):
    proc = subprocess.run([sys.executable, "-m", "placeto.cli.main", *shlex.split(cmd)], capture_output=True, text=True,
                          cwd=root, env=_env(root), timeout=120)
    case = next(cid for cid, c, _ in CASES if c == cmd)
    assert (proc.returncode, proc.stderr) == (results[case]["code"], results[case]["stderr"])


def test_simulate_json_is_strict_json_when_the_lower_bound_is_zero(root):
    """All costs zero: the ratio to the lower bound is undefined, printed as null (never a bare NaN/Infinity)."""
    (root / "zero.json").write_text(json.dumps(_graph(nodes=[{**n, "cost": 0} for n in GRAPH["nodes"]])))
    proc = subprocess.run([sys.executable, "-m", "placeto.cli.main", "simulate", "zero.json", "--placement", "p.json",
                           "--json"], capture_output=True, text=True, cwd=root, env=_env(root), timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert result["ratio_to_lower_bound"] is None


def test_a_closed_pipe_ends_quietly(root):
    """`placeto graph info G | head`: once a BrokenPipeError traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "placeto.cli.main", "graph", "info", "g.json"], cwd=root,
                            env=_env(root), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert err == "" and proc.returncode == 141


def test_a_diverging_run_stops_and_its_run_directory_survives(tmp_path, monkeypatch):
    """Library level (a NaN cannot be reached from the command line any more): a stale lock of a dead pid is
    taken over, the first checkpoint is written after the first update, a non-finite parameter at update 2
    stops training with an InputError that keeps that checkpoint, and the run then resumes from it."""
    import jax
    import jax.numpy as jnp

    from placeto.methods.placeto import train as T
    from placeto.checkpoint_io import read_blob
    from placeto.methods.placeto.config import tiny
    from simulator import InputError, cluster_preset
    from simulator.model.generate import layered_dag

    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").write_text("999999999\n")  # left by a dead process: nobody holds its flock
    real_update = T._update

    def poisoned(config, policy, grad_fn, apply, st, *rest):
        row = real_update(config, policy, grad_fn, apply, st, *rest)
        if st.update == 2:
            st.params = jax.tree.map(lambda x: x * jnp.nan, st.params)
        return row

    monkeypatch.setattr(T, "_update", poisoned)
    graph, cluster = layered_dag(6, seed=0), cluster_preset("placeto-k80", 2)
    with pytest.raises(InputError, match=r"diverged at update 2.*kept the checkpoint of update 1"):
        T.train(tiny(episodes=16), [graph], cluster, out)
    assert read_blob(out / "checkpoint.msgpack", T.CHECKPOINT_FIELDS)["update"] == 1
    assert (out / ".lock").read_text() == ""  # released
    monkeypatch.setattr(T, "_update", real_update)
    summary = T.train(tiny(episodes=12), [graph], cluster, out)
    assert (summary.start_episode, summary.episodes) == (4, 12)


def test_per_graph_messages_name_the_file_and_the_field(results):
    expect = {"pergraph-0": ("one --graph and one --devices count",), "pergraph-2": ("'groups=4'",),
              "pergraph-3": ("'groups'", "out of range"), "pergraph-4": ("devices=3",),
              "pergraph-10": ("run_ok/config.json", "not a run directory of rnn"),
              "pergraph-12": ("run_rnn_ok/config.json", "model fields"),
              "pergraph-15": ("run_ok", "not an rnn or hierarchical run directory"),
              "pergraph-16": ("run_rnn_ok", "needs a run directory of hierarchical"),
              "pergraph-17": ("run_rnn_ok", "the graph they were trained on"),
              "pergraph-19": ("checkpoint.msgpack", "truncated or corrupt"),
              "pergraph-20": ("run_rnn_cfg/config.json", "'hidden'"),
              "pergraph-22": ("unknown method 'hierarchcal'",)}
    for case, words in expect.items():
        for word in words:
            assert word in results[case]["stderr"], (case, word, results[case]["stderr"])


def test_issue_41_messages_name_the_file_the_field_and_the_function(results):
    expect = {"hw41-0": ("--seconds", "(0, 86400]"), "hw41-5": ("--checkpoint", "not used by --hardware"),
              "hw41-8": ("cpu:99999", "at most", "host CPU devices"), "hw41-9": ("'cpu:¹'", "not platform:index"),
              "hw41-10": ("--devices 1000", "host CPU devices"),
              "meta41-prof_list": ("prof_list.json", "meta.profile"),
              "meta41-prof_cores_str": ("prof_cores_str.json", "field 'cores'"),
              "meta41-prof_kind_missing": ("'local-cpu' has no costs",),
              "meta41-otg_empty": ("otg_empty.json", "meta.grouping.op_to_group", "empty"),
              "meta41-otg_zero": ("otg_zero.json", "meta.grouping.op_to_group", "4 nodes"),
              "meta41-no_nodes": ("no_nodes.json", "no nodes"),
              "meta41-profile-meta_huge_width": ("meta_huge_width.json", "hidden 65536", "largest"),
              "meta41-profile-meta_huge_depth": ("meta_huge_depth.json", "layers 60000"),
              "meta41-profile-meta_huge_taper": ("meta_huge_taper.json", "taper"),
              "run41-run_method_list": ("run_method_list/config.json", "field 'method'", "[1]"),
              "run41-compare-method-list": ("run_method_list/config.json", "field 'method'"),
              "run41-train-method-list": ("run_method_list/config.json", "field 'method'"),
              "run41-train-other-method": ("run_ok/config.json", "not a run directory of gdp"),
              "run41-init-from-gdp": ("run_gdp_update_float", "a gdp run directory, not a Placeto one"),
              "gdp41-update_float": ("checkpoint.msgpack", "field 'update'", "1.5"),
              "gdp41-update_huge": ("checkpoint.msgpack", "field 'update'"),
              "gdp41-samples_list": ("checkpoint.msgpack", "field 'samples'"),
              "gdp41-best_str": ("checkpoint.msgpack", "field 'best'"),
              "user41-0": ("usercode:raises raised RuntimeError: boom in user code", "--verbose"),
              "user41-1": ("usercode:shapes raised TypeError", "dot_general"),
              "user41-2": ("importing 'usersyntax' raised SyntaxError",),
              "user41-3": ("importing 'userimport' raised KeyError",),
              "user41-4": ("'usercode:factory_raises' raised ValueError: factory failed",),
              "user41-5": ("factory must take no arguments", "(x)"),
              "user41-6": ("usercode:identity traced to no operations", "nothing written"),
              "user41-7": ("--grouped-out keep.json is also --out",),
              "out41-place-over-graph": ("--out g.json is the graph file",),
              "out41-simulate-gantt-over-placement": ("--gantt p.json is the placement file",)}
    for case, words in expect.items():
        for word in words:
            assert word in results[case]["stderr"], (case, word, results[case]["stderr"])
