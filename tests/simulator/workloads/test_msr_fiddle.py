"""msr-fiddle's throughput inputs: their figures reproduced, splits read and written, bad files refused."""

from __future__ import annotations

import copy
import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from simulator.model.errors import InputError
from simulator.model.max_load import max_load_reference
from simulator.workloads.msr_fiddle import (read_split, read_throughput, split_dict, split_from_dict,
                                            throughput_from_dict, write_split)

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "datasets" / "outside" / "msr_fiddle"
REFERENCE = ROOT / "experiments" / "reference" / "msr_fiddle_max_load.csv"
LAYER = DATA / "throughput-inputs" / "LayerGraphs"


def reference_rows() -> list[dict]:
    with open(REFERENCE, newline="") as f:
        return [r for r in csv.DictReader(f) if r["kind"] == "layer"]


def expert_file(stem: str) -> Path:
    path = DATA / "human-experts" / f"{stem}_expert.json"
    return path if path.exists() else DATA / "human-experts" / f"{stem.replace('training', 'inference')}_expert.json"


@pytest.mark.parametrize("row", reference_rows(), ids=lambda r: r["graph"])
def test_expert_and_one_accelerator_figures_reproduced(row):
    """Scoring their human experts' splits gives the README's "human expert" column, and all on accelerator 0 its
    "one accelerator" column, to the table's two decimals (training graphs without an expert file infer the
    backward split from the inference one, as their program does)."""
    task = read_throughput(LAYER / f"{row['graph']}.json")
    expert = read_split(expert_file(row["graph"]), task)
    assert round(max_load_reference(task.graph, expert, task.cluster)[0], 2) == float(row["human_expert"])
    one = max_load_reference(task.graph, np.zeros(task.graph.n_nodes, np.int32), task.cluster)[0]
    assert round(one, 2) == float(row["one_accelerator"])


def test_graph_and_cluster_built_as_documented():
    task = read_throughput(LAYER / "bert24_training.json")
    g, c = task.graph, task.cluster
    assert g.meta["objective"] == "max_load" and g.n_nodes == 64
    assert c.kinds == ("accelerator",) * 6 + ("cpu",)
    assert c.capacity[0] == 17185374208.0
    raw = json.loads((LAYER / "bert24_training.json").read_text())
    first = raw["nodes"][1]
    i = task.ids.index(first["id"])
    assert g.cost_for("accelerator")[i] == first["fpgaLatency"] and g.cost_for("cpu")[i] == first["cpuLatency"]
    assert g.persistent_bytes[i] == first["size"]
    assert g.colocation[i] == f"color{first['colorClass']}"


def test_split_written_reads_back(tmp_path):
    task = read_throughput(LAYER / "gnmt_training.json")
    p = read_split(expert_file("gnmt_training"), task)
    load, _ = max_load_reference(task.graph, p, task.cluster)
    write_split(tmp_path / "s.json", task, p, np.zeros(task.cluster.n_devices), load)
    assert np.array_equal(read_split(tmp_path / "s.json", task), p)
    d = split_dict(task, p, np.zeros(task.cluster.n_devices), load)
    assert set(d) == {"maxLoad", "fpgas", "cpus"} and len(d["fpgas"]) == 6 and len(d["cpus"]) == 1


def small() -> dict:
    return {"maxSizePerFPGA": 10.0, "maxFPGAs": 2, "maxCPUs": 1,
            "nodes": [{"id": k, "supportedOnFpga": 1, "cpuLatency": 10.0, "fpgaLatency": 1.0, "isBackwardNode": 0,
                       "colorClass": k, "size": 1.0} for k in range(3)],
            "edges": [{"sourceId": 0, "destId": 1, "cost": 0.5}, {"sourceId": 1, "destId": 2, "cost": 0.25}]}


def _set(path, value):
    def edit(d):
        *keys, last = path
        for k in keys:
            d = d[k]
        if value is KeyError:
            del d[last]
        else:
            d[last] = value
    return edit


BAD = [
    ("missing field", _set(["nodes", 1, "fpgaLatency"], KeyError), "node id 1: missing field 'fpgaLatency'"),
    ("wrong type", _set(["nodes", 2, "size"], "big"), "node id 2: field 'size'"),
    ("NaN", _set(["nodes", 0, "cpuLatency"], math.nan), "node id 0: field 'cpuLatency'"),
    ("negative", _set(["edges", 1, "cost"], -1.0), "field 'cost'"),
    ("unknown endpoint", _set(["edges", 0, "destId"], 7), "field 'destId': unknown node id 7"),
    ("cycle", lambda d: d["edges"].append({"sourceId": 2, "destId": 0, "cost": 0.25}), "cycle"),
    ("two costs", lambda d: d["edges"].append({"sourceId": 0, "destId": 2, "cost": 0.75}), "node id 0"),
    ("top level", _set(["maxFPGAs"], 0), "field 'maxFPGAs'"),
]


@pytest.mark.parametrize("what,edit,needle", BAD, ids=[b[0] for b in BAD])
def test_malformed_file_one_line_error_naming_file_and_field(tmp_path, what, edit, needle):
    d = copy.deepcopy(small())
    edit(d)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    with pytest.raises(InputError) as e:
        read_throughput(path)
    message = str(e.value)
    assert "\n" not in message and message.startswith(str(path)) and needle in message, message


def test_split_errors_name_the_node():
    task = throughput_from_dict(small(), "small")
    with pytest.raises(InputError, match="unknown node id 9"):
        split_from_dict({"fpgas": [{"nodes": [9]}], "cpus": []}, task)
