"""placeto.cli.eval: `placeto eval` simulating only, and a bad device spec on the command line."""

import argparse

import numpy as np
import pytest

from placeto.cli.calibrate import add_calibrate_arguments
from placeto.cli.eval import add_eval_arguments, run_eval
from simulator import save_graph, save_placement
from simulator.model.errors import InputError
from simulator.model.generate import layered_dag



def _eval_args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_eval_arguments(p)
    return p.parse_args(list(argv))


def test_eval_simulate_only(tmp_path, capsys):
    g = layered_dag(40, seed=0)
    save_graph(g, tmp_path / "g.json")
    save_placement(tmp_path / "a.json", np.zeros(g.n_nodes, int), ["/gpu:0", "/gpu:1"])
    save_placement(tmp_path / "b.json", np.arange(g.n_nodes) % 2, ["/gpu:0", "/gpu:1"])
    assert run_eval(_eval_args(str(tmp_path / "g.json"), "--placement", str(tmp_path / "a.json"),
                               str(tmp_path / "b.json"))) == 0
    out = capsys.readouterr().out
    assert "a.json" in out and "b.json" in out and "measured" not in out
    save_placement(tmp_path / "short.json", np.zeros(3, int), ["/gpu:0", "/gpu:1"])
    with pytest.raises(InputError, match="placement has 3 entries but graph"):
        run_eval(_eval_args(str(tmp_path / "g.json"), "--placement", str(tmp_path / "short.json")))
    with pytest.raises(InputError, match="needs --hardware"):
        run_eval(_eval_args(str(tmp_path / "g.json"), "--placement", str(tmp_path / "a.json"), "--costs", "units"))
    p = argparse.ArgumentParser()
    add_calibrate_arguments(p)
    assert p.parse_args(["--out", "c.json"]).devices == 2


def test_bad_device_spec_on_the_command_line_is_one_line_exit_2(capsys):
    from placeto.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["calibrate", "--out", "c.json", "--devices", "cpu:0,tpu"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "entry 1 'tpu' is not platform:index" in err, err
