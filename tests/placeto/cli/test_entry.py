"""The `placeto` console script (placeto.cli.entry): a Ctrl-C while the command line's modules import is one line
and exit 130, not a KeyboardInterrupt traceback from inside an import."""

from __future__ import annotations

import signal
import sys

import placeto.cli
from placeto.cli import entry
from tests.helpers.signals import Run


class _InterruptingFinder:
    """A meta-path finder that interrupts the import of placeto.cli.main, as a Ctrl-C there would."""

    def find_spec(self, name, path=None, target=None):
        if name == "placeto.cli.main":
            raise KeyboardInterrupt
        return None


def test_an_interrupt_during_the_imports_is_one_line(monkeypatch, capsys):
    monkeypatch.delitem(sys.modules, "placeto.cli.main", raising=False)
    monkeypatch.delattr(placeto.cli, "main", raising=False)  # else `from placeto.cli import main` finds it there
    monkeypatch.setattr(sys, "meta_path", [_InterruptingFinder(), *sys.meta_path])
    assert entry.main() == 130
    assert capsys.readouterr().err == "placeto: interrupted (SIGINT): starting\n"


def test_a_real_ctrl_c_at_start_up_is_one_line(tmp_path):
    """SIGINT to the process group a moment after the interpreter starts (amid the imports on this machine; past
    them on a fast one, where the command line's own handling answers the same way)."""
    run = Run([sys.executable, "-m", "placeto.cli.entry", "compare", "datasets/nmt/nmt_004.json.gz",
               "--seconds", "600", "--methods", "local-search", "--quiet"], cwd=entry.__file__.rsplit("/placeto/", 1)[0])
    run.wait_for(lambda: run.cpu_seconds() >= 0.15, timeout=60)
    run.send(signal.SIGINT)
    assert run.finish() == 130
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("placeto: interrupted (SIGINT)"), run.stderr
