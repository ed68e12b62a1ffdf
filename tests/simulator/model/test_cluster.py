"""The cluster file's optional latency and hosts: round trip, the published preset unchanged, one-line errors
naming the file and the field."""

import json

import pytest

from simulator import InputError
from simulator.model.cluster import Cluster, Device, Host, cluster_preset, load_cluster, save_cluster

HOSTED = {"format": "placeto-cluster", "version": 1, "name": "local", "delta1_us": 10.0, "delta2_us": 20.0,
          "bandwidth_bytes_per_us": 5000.0, "latency_us": 12.5,
          "hosts": [{"name": "cpu", "dispatch_us": 15.0, "transfer_us": 40.0}],
          "devices": [{"name": f"/cpu:{i}", "kind": "local-cpu", "memory_bytes": 1e9, "host": "cpu"}
                      for i in range(2)]}


def write(tmp_path, obj, name="c.json"):
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    return path


def test_hosts_and_latency_round_trip(tmp_path):
    c = load_cluster(write(tmp_path, HOSTED))
    assert c.latency_us == 12.5 and c.hosts == (Host("cpu", 15.0, 40.0),)
    assert [d.host for d in c.devices] == ["cpu", "cpu"]
    model = c.host_model
    assert model.host.tolist() == [0, 0] and model.n_hosts == 1
    assert model.dispatch_us.tolist() == [15.0, 15.0] and model.transfer_us.tolist() == [40.0, 40.0]
    save_cluster(c, tmp_path / "again.json")
    assert load_cluster(tmp_path / "again.json") == c
    assert json.loads((tmp_path / "again.json").read_text()) == HOSTED


def test_the_published_preset_file_is_unchanged():
    """No host or latency keys when they are not set: the placeto-k80 file is what it always was."""
    d = cluster_preset("placeto-k80", 2).to_dict()
    assert d == {"format": "placeto-cluster", "version": 1, "name": "placeto-k80",
                 "devices": [{"name": f"/gpu:{i}", "kind": "k80", "memory_bytes": 12e9} for i in range(2)],
                 "delta1_us": 5.7, "delta2_us": 25.0, "bandwidth_bytes_per_us": 7600.0}
    model = cluster_preset("placeto-k80", 3).host_model
    assert model.host.tolist() == [0, 1, 2] and not model.dispatch_us.any() and not model.transfer_us.any()


def _mutated(change):
    d = json.loads(json.dumps(HOSTED))
    change(d)
    return d


BAD = [
    ("latency negative", lambda d: d.update(latency_us=-1),
     "cluster 'local': field 'latency_us': -1.0 is out of range"),
    ("latency string", lambda d: d.update(latency_us="5"), "field 'latency_us': '5' is not a number"),
    ("latency huge", lambda d: d.update(latency_us=1e308), "field 'latency_us': 1e+308 is out of range"),
    ("dispatch nan", lambda d: d["hosts"][0].update(dispatch_us=float("nan")),
     "host 'cpu': field 'dispatch_us': nan is not a finite number"),
    ("transfer negative", lambda d: d["hosts"][0].update(transfer_us=-3),
     "host 'cpu': field 'transfer_us': -3.0 is out of range"),
    ("hosts not a list", lambda d: d.update(hosts={"cpu": 1}), "field 'hosts' must be a list"),
    ("host not an object", lambda d: d.update(hosts=[3]), "host #0: expected an object"),
    ("host without name", lambda d: d["hosts"][0].pop("name"), "host #0: missing field 'name'"),
    ("host name int", lambda d: d["hosts"][0].update(name=4), "host 4: field 'name' must be a string"),
    ("host unknown field", lambda d: d["hosts"][0].update(cores=2), "host 'cpu': unknown field 'cores'"),
    ("duplicate hosts", lambda d: d["hosts"].append(dict(d["hosts"][0])), "field 'hosts': duplicate host names"),
    ("unknown host", lambda d: d["devices"][1].update(host="gpu"),
     "device '/cpu:1': field 'host': 'gpu' is not a host of the cluster (cpu)"),
    ("device without host", lambda d: d["devices"][1].pop("host"), "device '/cpu:1': missing field 'host'"),
    ("host but no hosts", lambda d: d.pop("hosts"), "field 'host': 'cpu' is not a host of the cluster (it has none)"),
    ("host int", lambda d: d["devices"][0].update(host=1), "device '/cpu:0': field 'host' must be a string"),
]


@pytest.mark.parametrize("name, change, message", BAD, ids=[b[0] for b in BAD])
def test_bad_host_fields_are_one_line_errors_naming_file_and_field(tmp_path, name, change, message):
    path = write(tmp_path, _mutated(change), "bad.json")
    with pytest.raises(InputError) as e:
        load_cluster(path)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value) and "\n" not in str(e.value)


def test_the_time_bound_counts_latency_and_host_times():
    """1000 ops of 9.995e14 us in all come within 5e11 of the 1e15 us bound: a latency or a host time of 1e9 us per
    op or transfer (1e12 in all) crosses it (an InputError from both simulators); without them it simulates."""
    from simulator import simulate, simulate_reference
    from simulator.model.graph import make_graph

    graph = make_graph("long", [{"name": f"v{i}", "cost": 1e12 if i else 5e11, "out_bytes": [8]}
                                for i in range(1000)], [(i, i + 1, 0) for i in range(999)])
    placement = [i % 2 for i in range(1000)]

    def cluster(**kw):
        host = "h" if "hosts" in kw else None
        return Cluster("slow", (Device("/0", "k80", 1e9, host), Device("/1", "k80", 1e9, host)), 1.0, 1.0, 1e3,
                       **kw)

    assert simulate(graph, placement, cluster()).runtime > 9.9e14
    for kw in ({"latency_us": 1e9}, {"hosts": (Host("h", 0.0, 1e9),)}, {"hosts": (Host("h", 1e9, 0.0),)}):
        for sim in (simulate, simulate_reference):
            with pytest.raises(InputError, match="simulated times could reach"):
                sim(graph, placement, cluster(**kw))
