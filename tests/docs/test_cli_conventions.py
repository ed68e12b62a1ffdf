"""One set of CLI conventions: where a command's device count comes from, compare's default methods,
and help that documents every argument and every default."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from placeto.cli.arguments import DEFAULT_DEVICES, resolve_devices
from simulator.arguments import HelpFormatter, OneLineParser, format_default, shows_default
from placeto.cli.main import build_parser, main
from simulator.model.cluster import cluster_preset, save_cluster
from simulator.model.errors import InputError
from simulator.model.generate import layered_dag
from simulator.model.io import save_graph
from simulator.model.placement_file import save_placement

COUNTED = ("simulate", "place", "train", "compare", "eval")  # commands whose --devices is a device count


@pytest.fixture
def files(tmp_path):
    """g.json (30 nodes); p4.json: a placement naming 4 devices; p_bare.json: one naming none, using device 3;
    c8.json: an 8-device cluster."""
    graph = layered_dag(30, seed=0)
    save_graph(graph, tmp_path / "g.json")
    save_placement(tmp_path / "p4.json", np.arange(graph.n_nodes) % 4, [f"/gpu:{i}" for i in range(4)])
    (tmp_path / "p_bare.json").write_text(json.dumps({"placement": [int(x) for x in np.arange(graph.n_nodes) % 4]}))
    save_cluster(cluster_preset("placeto-k80", 8), tmp_path / "c8.json")
    return tmp_path


def _error(capsys, argv: list[str]) -> str:
    """The one stderr line of a command that must exit 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


# ---- device counts ---------------------------------------------------------------------------------------------
def test_the_default_device_count_is_four():
    assert DEFAULT_DEVICES == 4 and resolve_devices(None) == 4
    assert resolve_devices(None, [("placement P", None)]) == 4  # a file that records no devices says nothing
    assert resolve_devices(None, [("placement P", 2)]) == 2
    assert resolve_devices(2, [("placement P", None)]) == 2
    for command in ("simulate g.json --placement p.json", "place g.json --out p.json", "eval g.json --placement p.json",
                    "train --graph g.json --out run"):
        assert build_parser().parse_args(command.split()).devices is None  # resolved later, against the files
    assert build_parser().parse_args(["compare", "g.json"]).devices == [DEFAULT_DEVICES]


def test_simulate_takes_the_placement_files_count(files, capsys):
    """Without --devices, simulate runs the placement on as many devices as it names (once: always on 2)."""
    assert main(["simulate", str(files / "g.json"), "--placement", str(files / "p4.json"), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["devices"]) == 4
    assert main(["simulate", str(files / "g.json"), "--placement", str(files / "p_bare.json"), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["devices"]) == DEFAULT_DEVICES


def test_a_device_count_that_contradicts_the_placement_file_is_one_line(files, capsys):
    err = _error(capsys, ["simulate", str(files / "g.json"), "--placement", str(files / "p4.json"), "--devices", "2"])
    assert "--devices 2" in err and str(files / "p4.json") in err and "4 devices" in err
    err = _error(capsys, ["eval", str(files / "g.json"), "--placement", str(files / "p4.json"), "--devices", "2"])
    assert "--devices 2" in err and str(files / "p4.json") in err and "4 devices" in err


def test_a_device_count_that_contradicts_the_cluster_file_is_one_line(files, capsys):
    g, c8 = str(files / "g.json"), str(files / "c8.json")
    for argv in (["simulate", g, "--placement", str(files / "p_bare.json"), "--cluster", c8, "--devices", "4"],
                 ["place", g, "--method", "etf", "--cluster", c8, "--devices", "4", "--out", str(files / "o.json")],
                 ["train", "--graph", g, "--cluster", c8, "--devices", "4", "--config", "tiny", "--out",
                  str(files / "run")],
                 ["eval", g, "--placement", str(files / "p_bare.json"), "--cluster", c8, "--devices", "4"]):
        err = _error(capsys, argv)
        assert "--devices 4" in err and c8 in err and "8 devices" in err, (argv[0], err)
    assert not (files / "o.json").exists() and not (files / "run").exists()
    err = _error(capsys, ["simulate", g, "--placement", str(files / "p4.json"), "--cluster", c8])
    assert c8 in err and str(files / "p4.json") in err and "8" in err and "4" in err


def test_place_hardware_checks_its_devices_against_the_cluster_before_starting_devices(files, capsys):
    err = _error(capsys, ["place", str(files / "g.json"), "--hardware", "--cluster", str(files / "c8.json"),
                          "--devices", "cpu:0,cpu:1", "--out", str(files / "o.json")])
    assert "--devices 2" in err and "8 devices" in err


def test_place_and_train_without_devices_use_the_default_or_the_cluster(files, capsys):
    g = str(files / "g.json")
    assert main(["place", g, "--method", "etf", "--out", str(files / "a.json")]) == 0
    assert f"on {DEFAULT_DEVICES} devices" in capsys.readouterr().out
    assert main(["place", g, "--method", "etf", "--cluster", str(files / "c8.json"), "--out",
                 str(files / "b.json")]) == 0
    assert "on 8 devices" in capsys.readouterr().out
    from placeto.cli.placers import _train_inputs

    args = build_parser().parse_args(["train", "--graph", g, "--out", "run"])
    assert [c.n_devices for c in _train_inputs(args)[1]] == [DEFAULT_DEVICES]
    args = build_parser().parse_args(["train", "--graph", g, "--out", "run", "--cluster", str(files / "c8.json")])
    assert [c.n_devices for c in _train_inputs(args)[1]] == [8]


def test_two_files_that_disagree():
    with pytest.raises(InputError, match="cluster C has 8 devices but placement P has 4"):
        resolve_devices(None, [("cluster C", 8), ("placement P", 4)])


# ---- compare's methods -------------------------------------------------------------------------------------------
def test_compare_includes_the_shipped_learned_methods_by_default():
    from placeto.baselines import METHODS
    from placeto.harness.compare import LEARNED, PER_GRAPH, resolve_methods
    from placeto.methods import registry
    from placeto.policies import DEFAULT_POLICY, shipped_policies

    args = build_parser().parse_args(["compare", "g.json"])
    names = resolve_methods(args.methods)
    assert set(LEARNED) == {"placeto", "placeto-search", "gdp", "gdp-search"}
    assert names == [*METHODS, *LEARNED] and not set(PER_GRAPH) & set(names)
    assert resolve_methods("baselines") == list(METHODS)
    assert resolve_methods("baselines,rnn,placeto") == [*METHODS, "rnn", "placeto"]
    assert resolve_methods("learned") == list(LEARNED)
    with pytest.raises(InputError, match="unknown method 'nope'"):
        resolve_methods("all,nope")
    # without --checkpoint each learned row uses its kind's shipped policy, and both are shipped
    shipped = {p.name for p in shipped_policies()}
    assert DEFAULT_POLICY in shipped and registry.get("gdp").default_checkpoint in shipped
    assert registry.get("placeto").default_checkpoint is None  # None: placeto.policies.DEFAULT_POLICY


# ---- help ------------------------------------------------------------------------------------------------------
def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) of the parser and of every subcommand, depth first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, path + (name,))


def _help(parser: argparse.ArgumentParser, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "10000")  # no wrapping: a default is never split across lines
    return parser.format_help()


def test_every_argument_has_help_and_every_parser_shows_defaults():
    parsers = list(_parsers(build_parser()))
    assert len(parsers) > 12
    for path, parser in parsers:
        assert isinstance(parser, OneLineParser) and parser.formatter_class is HelpFormatter, path
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert action.help and action.help.strip(), (path, action.option_strings or action.dest)


def test_every_default_shows_in_the_help(monkeypatch):
    shown = 0
    for path, parser in _parsers(build_parser()):
        text = _help(parser, monkeypatch)
        for action in parser._actions:
            if shows_default(action) and "%(default)" not in (action.help or ""):
                assert f"(default: {format_default(action.default)})" in text, (path, action.option_strings)
                shown += 1
    assert shown > 30  # not vacuous: the commands have this many defaults


def test_the_formatter_leaves_defaults_that_say_nothing_to_the_help_text(monkeypatch):
    p = OneLineParser(prog="x")
    p.add_argument("--a", type=int, default=3, help="alpha")
    p.add_argument("--b", default=None, help="beta (default: the file's)")
    p.add_argument("--c", action="store_true", help="gamma")
    p.add_argument("--d", default=[2, 4, 8], help="delta")
    text = _help(p, monkeypatch)
    assert "alpha (default: 3)" in text and "beta (default: the file's)\n" in text
    assert "gamma\n" in text and "delta (default: 2,4,8)" in text and "None" not in text


def test_every_device_count_help_says_the_default(monkeypatch):
    for path, parser in _parsers(build_parser()):
        if path and path[0] in COUNTED:
            devices = next(a for a in parser._actions if "--devices" in a.option_strings)
            line = next(ln for ln in _help(parser, monkeypatch).splitlines() if ln.strip().startswith("--devices"))
            assert f"{DEFAULT_DEVICES}" in line and (devices.default in (None, [DEFAULT_DEVICES])), (path, line)


def test_help_texts_say_what_the_commands_do(monkeypatch):
    parser = build_parser()
    top = _help(parser, monkeypatch)
    assert "No logic a test would want" not in top and "parses arguments" not in top
    epilog = top[top.index("workflow"):]
    steps = ["placeto graph info", "placeto place", "placeto compare", "placeto simulate", "placeto eval"]
    at = [epilog.index(s) for s in steps]
    assert at == sorted(at), at  # the workflow, in order, in the epilog
    assert "--hardware" in epilog[at[-1]:].splitlines()[0]
    subs = dict(_parsers(parser))
    train = next(a for a in parser._subparsers._group_actions[0]._choices_actions if a.dest == "train")
    assert all(m in train.help for m in ("placeto", "gdp", "rnn", "hierarchical")) and "a Placeto" not in train.help
    episodes = next(a for a in subs[("train",)]._actions if "--episodes" in a.option_strings)
    assert all(m in episodes.help for m in ("placeto", "gdp", "rnn", "hierarchical", "episodes", "placements"))
