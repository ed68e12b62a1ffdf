"""The `placeto` console script: `placeto.cli.main`, with a Ctrl-C while its modules import stopping in one line.

`placeto.cli.main` turns SIGINT and SIGTERM into one line and exit 130 / 143 (`simulator.interrupts`) once its
imports are done; they take a few seconds on a small machine (JAX, flax, SciPy). A SIGTERM in that window already
ends the process without a word (its default action, exit 143); a Ctrl-C would be a KeyboardInterrupt traceback
from inside some import. So this module imports nothing of the project at its top, and imports the command line
inside `main`, where that interrupt is caught.
"""

from __future__ import annotations

import sys

INTERRUPTED = 130  # 128 + SIGINT, as the command line's own interrupts


def main() -> int:
    """Run the `placeto` command line (sys.argv); exit status."""
    try:
        from placeto.cli import main as cli  # noqa: PLC0415 (the point of this module: see its docstring)
    except KeyboardInterrupt:
        print("placeto: interrupted (SIGINT): starting", file=sys.stderr)
        return INTERRUPTED
    return cli.main()


def run() -> None:
    """The console script: `main`, then `placeto.cli.main.exit_process` (an interrupted command ends at once)."""
    code = main()
    if code == INTERRUPTED and "placeto.cli.main" not in sys.modules:  # stopped while importing: nothing to skip
        sys.exit(code)
    from placeto.cli.main import exit_process  # noqa: PLC0415 (imported by `main` already)

    exit_process(code)


if __name__ == "__main__":
    run()
