"""Every module and source file the docs, docstrings and comments name exists.

A name is a dotted `placeto.x.y` / `simulator.x.y` (its longest module prefix must be a module, and a name right
after the package itself must be in the package's `__all__` or be a module) or a path `placeto/x/y.py`,
`simulator/...py`, `tests/...py`, `experiments/...py`. Files moved or renamed leave no stale name behind.
Generated results (experiments/results/) record what was run when and are not checked.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("placeto", "simulator")
PATH = re.compile(r"(?<![\w/.-])((?:placeto|simulator|tests|experiments)/[\w/]+\.py)\b")
DOTTED = re.compile(r"(?<![\w.])((?:placeto|simulator)(?:\.[A-Za-z_]\w*)+)")
SKIP = ("experiments/results/", "tests/test_layout.py", "tests/docs/test_references.py")  # generated results;
#   synthetic packages
NOT_NAMES = {  # text that looks like a name and is not one
    "placeto/__main__.py",  # "there is no placeto/__main__.py" (experiments/reproduce/paper_table.py)
    "placeto.list_start",  # a cache key (placeto/methods/placeto/env.py)
    "placeto.generated",  # the generator name generated graph files record (simulator/workloads/generated.py)
}


def modules(root: Path = ROOT) -> set[str]:
    out = set()
    for top in (*PACKAGES, "tests", "experiments"):
        for path in (root / top).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            out.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def package_names(root: Path = ROOT) -> dict[str, set[str]]:
    """Package -> the names its __init__ exports (`__all__`, and `__version__`)."""
    out = {}
    for pkg in PACKAGES:
        tree = ast.parse((root / pkg / "__init__.py").read_text())
        exported = [ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)]
        out[pkg] = set(exported[0] if exported else ()) | {"__version__"}
    return out


def stale_names(text: str, known: set[str], exported: dict[str, set[str]], root: Path = ROOT) -> list[str]:
    """The names in `text` that name no module or file."""
    bad = [p for p in PATH.findall(text) if p not in NOT_NAMES and not (root / p).exists()]
    for name in DOTTED.findall(text):
        if name in NOT_NAMES:
            continue
        parts = name.split(".")
        k = max((i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in known), default=0)
        if k == 0 or (k == 1 and parts[1] not in exported.get(parts[0], set())):
            bad.append(name)
    return bad


def test_stale_names_are_found():
    known, exported = {"placeto", "placeto.a"}, {"placeto": {"run"}}
    text = "see placeto.a.f, placeto.run, placeto.gone.f and placeto/a.py, tests/none.py"
    assert stale_names(text, known, exported, Path("/nonexistent")) == ["placeto/a.py", "tests/none.py",
                                                                        "placeto.gone.f"]


def test_docs_and_code_name_only_what_exists():
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    known, exported = modules(), package_names()
    found = []
    for name in files:
        path = ROOT / name
        if not name.endswith((".py", ".md")) or name.startswith(SKIP) or not path.is_file():
            continue
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            found += [f"{name}:{i}: {bad}" for bad in stale_names(line, known, exported)]
    assert not found, "names of modules or files that do not exist:\n" + "\n".join(found)
