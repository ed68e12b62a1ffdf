"""experiments.benchmarks.readme_times: it times the README's hardware commands as the README gives them, each after
its untimed setup in the same directory."""

import sys
from pathlib import Path

from experiments.benchmarks import readme_times as rt

ROOT = Path(__file__).resolve().parents[2]


def test_the_hardware_commands_are_the_readmes_and_measured_by_default():
    readme = (ROOT / "README.md").read_text()
    for name in ("place-hardware", "eval-hardware"):
        cmd = rt.COMMANDS[name]
        assert name in rt.DEFAULT_COMMANDS and cmd.states == ("cold", "warm")
        shown = " ".join(a.replace("{tmp}/", "") for a in cmd.argv[len(rt.PLACETO):])
        assert f"placeto {shown}" in " ".join(readme.split()), shown  # the README's own command line
        for setup in cmd.setup:
            assert f"placeto {' '.join(a.replace('{tmp}/', '') for a in setup[len(rt.PLACETO):])}" in \
                " ".join(readme.replace("\\\n", " ").split())
    assert (ROOT / "datasets/nmt/nmt_004.json.gz").exists() and (ROOT / "examples/flax_trainstate.py").exists()


def test_setup_runs_first_untimed_in_the_same_directory(tmp_path):
    write = (sys.executable, "-c", "import time; open('{tmp}/made', 'w').write('x'); time.sleep(5.0)")
    read = (sys.executable, "-c", "import sys; sys.exit(0 if open('{tmp}/made').read() == 'x' else 5)")
    ok = rt.run(rt.Timed("t", read, "test", ("cold",), setup=(write,)), "cold", tmp_path, 60)
    assert ok.status == 0  # the setup's file is there: the same directory, the setup first
    assert ok.wall_s < 5.0  # the setup's 5 s sleep is not in the time (a Python start is, well under it)
    failing = (sys.executable, "-c", "import sys; sys.exit(3)")
    bad = rt.run(rt.Timed("t", read, "test", ("cold",), setup=(failing, write)), "cold", tmp_path, 60)
    assert bad.status == 3 and bad.wall_s == 0.0  # a failed setup is the status; nothing timed
