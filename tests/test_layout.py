"""The layout a reader can walk, read from the code with `ast`: folders of at most MAX_MODULES modules, imports at
the top of the module, no private name used across modules, and a world (`simulator`) that never imports the agent
(`placeto`). `python tests/test_layout.py` prints the figures."""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("simulator", "placeto")
MAX_MODULES = 15  # modules in one folder, its __init__ not counted
MAX_INNER_IMPORTS = 8  # project imports inside function bodies, outside the CLI: each keeps JAX or flax out of a
#   module that loads graph files or families (its comment says so); lower it when one goes
CLI_MODULES = ("placeto/cli/",)  # the command line: imports there wait until a command needs them (start-up time)
CLI_FILES = ("cli.py",)  # a method's own command-line arguments (placeto/methods/*/cli.py)


def _files(root: Path = ROOT) -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))]


def _is_project(module: str | None) -> bool:
    return bool(module) and module.split(".")[0] in PACKAGES


def _is_cli(path: Path, root: Path) -> bool:
    rel = path.relative_to(root).as_posix()
    return rel.startswith(CLI_MODULES) or (rel.startswith("placeto/methods/") and path.name in CLI_FILES)


def folder_sizes(root: Path = ROOT) -> Counter:
    """Folder (relative path) -> how many modules it holds, its __init__ not counted."""
    return Counter(p.parent.relative_to(root).as_posix() for p in _files(root) if p.name != "__init__.py")


def _project_imports(node: ast.AST) -> list[ast.stmt]:
    out = []
    for n in ast.walk(node):
        if isinstance(n, ast.ImportFrom) and n.level == 0 and _is_project(n.module):
            out.append(n)
        elif isinstance(n, ast.Import) and any(_is_project(a.name) for a in n.names):
            out.append(n)
    return out


def inner_imports(root: Path = ROOT) -> list[str]:
    """"file:line" of every project import inside a function body, outside the CLI."""
    out = []
    for path in _files(root):
        if _is_cli(path, root):
            continue
        tree = ast.parse(path.read_text(), str(path))
        seen = set()
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for n in _project_imports(fn):
                    if id(n) not in seen:
                        seen.add(id(n))
                        out.append(f"{path.relative_to(root).as_posix()}:{n.lineno}")
    return sorted(out)


def private_imports(root: Path = ROOT) -> list[str]:
    """"file:line name" of every `from project.module import _name`."""
    out = []
    for path in _files(root):
        for n in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(n, ast.ImportFrom) and n.level == 0 and _is_project(n.module):
                out += [f"{path.relative_to(root).as_posix()}:{n.lineno} {a.name}" for a in n.names
                        if a.name.startswith("_")]
    return out


def world_imports_agent(root: Path = ROOT) -> list[str]:
    """"file:line" of every import of `placeto` in `simulator`, anywhere in a module."""
    out = []
    for path in sorted((root / "simulator").rglob("*.py")):
        for n in _project_imports(ast.parse(path.read_text(), str(path))):
            names = [n.module] if isinstance(n, ast.ImportFrom) else [a.name for a in n.names]
            if any(name.split(".")[0] == "placeto" for name in names):
                out.append(f"{path.relative_to(root).as_posix()}:{n.lineno}")
    return out


def docstring_summaries(root: Path = ROOT) -> list[str]:
    """The summary paragraph (whitespace folded) of every module, class and function docstring."""
    out = []
    for path in _files(root):
        tree = ast.parse(path.read_text(), str(path))
        for node in [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                          ast.ClassDef)))]:
            doc = ast.get_docstring(node)
            if doc:
                out.append(doc.split("\n\n")[0].strip())
    return out


def test_metrics_on_a_synthetic_package(tmp_path):
    (tmp_path / "simulator").mkdir()
    (tmp_path / "placeto" / "cli").mkdir(parents=True)
    (tmp_path / "simulator" / "a.py").write_text("import placeto.x\ndef f():\n    from simulator import b\n")
    (tmp_path / "simulator" / "b.py").write_text("from simulator.a import _hidden, shown\n")
    (tmp_path / "placeto" / "cli" / "main.py").write_text("def main():\n    from placeto import x\n")
    (tmp_path / "placeto" / "x.py").write_text("def g():\n    import json\n    import simulator.a\n")
    assert folder_sizes(tmp_path) == Counter({"simulator": 2, "placeto/cli": 1, "placeto": 1})
    assert inner_imports(tmp_path) == ["placeto/x.py:3", "simulator/a.py:3"]  # the CLI's and json's not counted
    assert private_imports(tmp_path) == ["simulator/b.py:1 _hidden"]
    assert world_imports_agent(tmp_path) == ["simulator/a.py:1"]


def test_no_folder_holds_more_than_max_modules():
    big = {f: n for f, n in folder_sizes().items() if n > MAX_MODULES}
    assert not big, f"folders of more than {MAX_MODULES} modules: {big}"


def test_imports_at_the_top_of_the_module():
    found = inner_imports()
    assert len(found) <= MAX_INNER_IMPORTS, (f"{len(found)} project imports inside functions outside the CLI "
                                             f"(at most {MAX_INNER_IMPORTS}):\n" + "\n".join(found))


def test_no_private_name_across_modules():
    assert not private_imports(), private_imports()


def test_the_world_never_imports_the_agent():
    assert not world_imports_agent(), world_imports_agent()


if __name__ == "__main__":
    sizes = folder_sizes()
    folder, most = sizes.most_common(1)[0]
    print(f"most modules in one folder: {most} ({folder})")
    print(f"project imports inside functions outside the CLI: {len(inner_imports())}")
    print(f"private names imported across modules: {len(private_imports())}")
    print(f"imports of placeto in simulator: {len(world_imports_agent())}")
    summaries = docstring_summaries()
    lengths = sorted(len(" ".join(s.split())) for s in summaries)
    one_line = sum("\n" not in s for s in summaries)
    print(f"docstrings: {len(summaries)}, summary paragraph median {lengths[len(lengths) // 2]} characters, "
          f"{100 * one_line / len(summaries):.0f}% one line")
    sys.exit(0)
