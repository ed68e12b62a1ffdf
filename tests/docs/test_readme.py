"""The README cannot rot: every command of its ```bash blocks runs here, and every flag the README and docs/ give
a `placeto` command exists in that command's parser.

The blocks run in order, each in one bash process (`set -e`: a failing command fails the test), in a scratch
directory holding a copy of datasets/ and examples/ (the commands write beside them; `place --hardware` leaves
the graph file as it is), with JAX's compilation cache and placeto's caches (calibrations, profiles) in the
scratch directory too. Budgets are made small (SMALLER: the README shows the real ones; a hardware run places a
smaller graph of the same family) and the hardware runs time fewer steps on the threads rig (EXTRA: the process
rig's own calibration, boundary fit and contention cost CI minutes and run end to end in
tests/placeto/harness/test_on_hardware.py, tests/simulator/hardware/test_dispatch.py and tests/simulator/tracing/test_importer.py); `make demo` and `make test`
are the set-up, not run here (CI runs `make test`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.hardware.plain_jit import plain_env
from tests.docs.readme_commands import code_blocks, commands, placeto_invocation

# one worker runs every block (`make test`: --dist loadgroup), in order, in one scratch directory: the calibration
# block 0's `place --hardware` caches there is what the next block's `eval --hardware` reuses, as on a user's machine
pytestmark = pytest.mark.xdist_group("test_readme")

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "experiments" / "README.md"]
SETUP = ("make demo", "make test")  # the set-up block: CI runs `make test` itself
README_MAX_BYTES = 15_000
SMALLER = [  # (pattern, replacement) applied to every README command before it runs
    (r"--episodes \d+", "--episodes 2"),
    (r"--seconds [\d.]+", "--seconds 0.2"),
    (r"--minutes [\d.]+", "--minutes 0.5"),
    # run for real: a smaller graph of the family (a step of about 30 ms, not 300; place --hardware took 67 s, not
    # 100-121 s, alone on this 2-core VM)
    (r"datasets/nmt/nmt_004\.json\.gz(?=.* --hardware)", "datasets/nmt/nmt_002.json.gz"),
]
EXTRA = [  # (pattern a command must match, flags appended): fewer timed steps on the hardware, the threads rig
    (r"^placeto place .*--hardware", "--top 1 --repeats 2 --candidates m-topo --rig threads"),  # m-topo: 2 stages
    (r"^placeto eval .*--hardware", "--repeats 2 --warmup 1 --rig threads"),
]


def shrink(command: str) -> str:
    for pattern, repl in SMALLER:
        command = re.sub(pattern, repl, command)
    for pattern, flags in EXTRA:
        if re.search(pattern, command):
            command = f"{command} {flags}"
    return command


def bash_blocks(path: Path):
    return [b for b in code_blocks(path) if b.lang in ("bash", "sh")]


def runnable_blocks():
    return [b for b in bash_blocks(README) if not all(c in SETUP for c in commands(b.text))]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    work = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "datasets", work / "datasets")
    shutil.copytree(ROOT / "examples", work / "examples", ignore=shutil.ignore_patterns("__pycache__", "*.json.gz"))
    return work


def test_readme_size_and_setup():
    assert README.stat().st_size <= README_MAX_BYTES, f"README is {README.stat().st_size} bytes"
    setup = [c for b in bash_blocks(README) for c in commands(b.text) if c in SETUP]
    assert setup == list(SETUP), "the README's first block is the two set-up commands"
    assert len(runnable_blocks()) >= 3


@pytest.mark.parametrize("index", range(len(runnable_blocks())))
def test_readme_block_runs(index, scratch):
    block = runnable_blocks()[index]
    script = "\n".join(shrink(c) for c in commands(block.text))
    bindir = Path(sys.executable).parent
    # a user's environment: XLA_FLAGS without the host device rig's flags (tests/conftest.py's kept)
    env = {k: v for k, v in plain_env(os.environ, "cpu").items() if k != "PYTHONPATH"}
    env.update(PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}", JAX_PLATFORMS="cpu",
               PLACETO_CACHE=str(scratch / "cache"), PLACETO_COMPILE_CACHE=str(scratch / "jax-cache"),
               MPLBACKEND="Agg")
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=scratch, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, (f"README block at {block.where} failed (exit {proc.returncode}):\n{script}\n"
                                  f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}")


def test_shrink_rewrites_budgets():
    assert shrink("placeto train --family nmt --out r --episodes 400") == \
        "placeto train --family nmt --out r --episodes 2"
    assert shrink("placeto place G --hardware --seconds 1 --out P") == \
        "placeto place G --hardware --seconds 0.2 --out P --top 1 --repeats 2 --candidates m-topo --rig threads"
    assert shrink("placeto graph info G") == "placeto graph info G"
    assert shrink("placeto place datasets/nmt/nmt_004.json.gz --hardware --out P") == \
        ("placeto place datasets/nmt/nmt_002.json.gz --hardware --out P --top 1 --repeats 2 --candidates m-topo "
         "--rig threads")
    assert shrink("placeto place datasets/nmt/nmt_004.json.gz --out P") == \
        "placeto place datasets/nmt/nmt_004.json.gz --out P"


# ---- flags against the parser ---------------------------------------------------------------------------------
def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def resolve(parser: argparse.ArgumentParser, words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The (sub)parser a command's leading words name, and the words that named it."""
    used = []
    for w in words:
        subs = subparsers(parser)
        if w not in subs:
            break
        parser, used = subs[w], used + [w]
    return parser, used


def documented_invocations():
    found = []
    for path in [README, *DOCS]:
        for block in bash_blocks(path):
            for command in commands(block.text):
                inv = placeto_invocation(command)
                if inv is not None:
                    found.append((block.where, command, *inv))
    return found


def test_docs_exist_and_have_commands():
    assert (ROOT / "docs" / "commands.md").exists()
    assert len(documented_invocations()) >= 30


def test_documented_flags_exist():
    from placeto.cli.main import build_parser

    root = build_parser()
    bad = []
    for where, command, words, flags in documented_invocations():
        parser, used = resolve(root, words)
        if subparsers(parser):
            bad.append(f"{where}: `{command}`: `placeto {' '.join(used)}` needs a subcommand")
            continue
        known = {s for a in parser._actions for s in a.option_strings}
        bad += [f"{where}: `{command}`: no {f} in `placeto {' '.join(used)}`" for f in flags if f not in known]
    assert not bad, "\n".join(bad)


def test_flag_check_catches_a_wrong_flag():
    from placeto.cli.main import build_parser

    parser, used = resolve(build_parser(), ["simulate", "G.json"])
    known = {s for a in parser._actions for s in a.option_strings}
    assert used == ["simulate"] and "--placement" in known and "--no-such-flag" not in known


def test_glossary_names_every_method():
    from placeto.baselines import METHODS
    from placeto.methods import registry

    text = README.read_text()
    glossary = text[text.index("## Glossary"):text.index("## Results")]
    names = [*METHODS, *(v for n in registry.names() for v in registry.get(n).variants)]
    missing = [n for n in names if f"`{n}`" not in glossary]
    assert not missing, f"methods without a glossary line: {missing}"


# ---- defaults quoted in prose against the parser -------------------------------------------------------------
QUOTED_DEFAULT = re.compile(r"`(--[a-z][\w-]*)[^`]*`[^.;()`]{0,20}[,(] ?default:? ([^);.]+)")


def leaf_parsers(parser: argparse.ArgumentParser, name: str = "") -> list[tuple[str, argparse.ArgumentParser]]:
    """Every (command, parser) with no subcommands under `parser`."""
    subs = subparsers(parser)
    if not subs:
        return [(name.strip(), parser)]
    return [leaf for word, sub in subs.items() for leaf in leaf_parsers(sub, f"{name} {word}")]


def _words(value) -> str:
    text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return " ".join(re.split(r"[\s,_-]+", text.lower())).strip()


def quoted_default_matches(quoted: str, default) -> bool:
    """Whether the prose's "default X" says the parser's default: numbers as numbers (a list default: one of its
    entries), else the same words (case, commas, hyphens and underscores aside)."""
    number = re.match(r"\s*(-?\d[\d,]*(?:\.\d+)?)", quoted)
    if number:
        values = default if isinstance(default, (list, tuple)) else [default]
        want = float(number.group(1).replace(",", ""))
        return any(isinstance(v, (int, float)) and not isinstance(v, bool) and float(v) == want for v in values)
    return _words(quoted) == _words(default)


def quoted_default_errors(text: str, where: str, root: argparse.ArgumentParser) -> list[str]:
    bad = []
    for m in QUOTED_DEFAULT.finditer(text):
        flag, quoted = m.group(1), m.group(2).strip()
        defaults = [(cmd, a.default) for cmd, p in leaf_parsers(root) for a in p._actions
                    if flag in a.option_strings and a.default not in (None, argparse.SUPPRESS)]
        if not any(quoted_default_matches(quoted, d) for _, d in defaults):
            said = ", ".join(f"{cmd}: {d!r}" for cmd, d in defaults) or "no command has a default for it"
            bad.append(f"{where}: `{flag}` quoted with default {quoted!r}, but {said}")
    return bad


def test_quoted_defaults_are_the_parsers():
    from placeto.cli.main import build_parser

    root = build_parser()
    found = [m for path in [README, *DOCS] for m in QUOTED_DEFAULT.finditer(path.read_text())]
    assert len(found) >= 4  # the check finds what the docs quote
    bad = [e for path in [README, *DOCS] for e in quoted_default_errors(path.read_text(), path.name, root)]
    assert not bad, "\n".join(bad)


def test_quoted_default_check_catches_a_wrong_default():
    from placeto.cli.main import build_parser

    root = build_parser()
    assert not quoted_default_errors("`--max-cp-growth` percent (default 5)", "x", root)
    assert quoted_default_errors("`--max-cp-growth` percent (default 7)", "x", root)
    assert quoted_default_errors("`--no-such-flag` (default 3)", "x", root)
    assert not quoted_default_errors("`--candidates` (default etf, m-sct, local search)", "x", root)
