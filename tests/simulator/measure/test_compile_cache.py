"""The persistent compilation cache of `placeto` commands (simulator.measure.compile_cache): where PLACETO_COMPILE_CACHE puts
it, `off`, an unusable directory (one warning, no cache), and a second command reading what the first wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from simulator.measure import compile_cache
from placeto.cli.main import build_parser
from simulator import save_graph
from simulator.model.generate import layered_dag

ENV = compile_cache.ENV


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    default = Path.home() / ".cache" / "placeto" / "jax"
    assert compile_cache.cache_dir({}) == default
    assert compile_cache.cache_dir({ENV: ""}) == default  # empty = unset
    assert compile_cache.cache_dir({"XDG_CACHE_HOME": "/xdg"}) == Path("/xdg/placeto/jax")
    assert compile_cache.cache_dir({"XDG_CACHE_HOME": "relative"}) == default  # XDG: a relative path is ignored
    assert compile_cache.cache_dir({ENV: "/a/b", "XDG_CACHE_HOME": "/xdg"}) == Path("/a/b")
    assert compile_cache.cache_dir({ENV: "here"}) == tmp_path / "here"  # made absolute
    assert compile_cache.cache_dir({ENV: "~/c"}) == Path.home() / "c"
    assert compile_cache.cache_dir({ENV: "off"}) is None
    assert compile_cache.cache_dir({ENV: " OFF "}) is None
    root = compile_cache.ROOT_ENV  # placeto's cache root moves the compilation cache with it
    assert compile_cache.cache_dir({root: "/r"}) == Path("/r/jax")
    assert compile_cache.cache_dir({root: "/r", ENV: "/a"}) == Path("/a")
    assert compile_cache.cache_dir({root: "/r", ENV: "off"}) is None


def test_jax_options_turn_the_cache_on_or_off(tmp_path):
    assert compile_cache.jax_options(None) == {"jax_enable_compilation_cache": False}
    on = compile_cache.jax_options(tmp_path)
    assert on["jax_enable_compilation_cache"] is True
    assert on["jax_compilation_cache_dir"] == str(tmp_path)
    assert on["jax_persistent_cache_min_compile_time_secs"] == 0.0  # small executables are kept too


def test_off_disables_and_creates_nothing(tmp_path):
    environ = {ENV: "off", "HOME": str(tmp_path)}
    assert compile_cache.enable(environ) is None
    assert environ["JAX_ENABLE_COMPILATION_CACHE"] == "false"  # for a later `import jax` and subprocesses
    assert "JAX_COMPILATION_CACHE_DIR" not in environ
    assert jax.config.jax_enable_compilation_cache is False
    assert list(tmp_path.iterdir()) == []


def test_unusable_directory_warns_once_and_runs_without(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(compile_cache, "_warned", False)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    environ = {ENV: str(blocker / "jax")}  # under a regular file: cannot be created, even by root
    assert compile_cache.usable(blocker / "jax") is not None
    assert compile_cache.enable(environ) is None
    assert compile_cache.enable(environ) is None
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"placeto: warning: compilation cache {blocker / 'jax'}: ")
    assert "running without it" in err[0]
    assert environ["JAX_ENABLE_COMPILATION_CACHE"] == "false"


def test_no_home_directory_warns_and_runs_without(monkeypatch, capsys):
    monkeypatch.setattr(compile_cache, "_warned", False)

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert compile_cache.enable({}) is None
    assert capsys.readouterr().err.startswith("placeto: warning: compilation cache: Could not determine home")


def test_usable_creates_the_directory(tmp_path):
    path = tmp_path / "x" / "y"
    assert compile_cache.usable(path) is None
    assert path.is_dir() and list(path.iterdir()) == []  # the probe file is gone


def test_help_says_how_to_move_or_disable_it():
    text = " ".join(build_parser().format_help().split())
    assert f"{ENV}=DIR" in text and f"{ENV}=off" in text and "~/.cache/placeto/jax" in text


@pytest.fixture(scope="module")
def tiny_graph(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("graph") / "g.json"
    save_graph(layered_dag(40, seed=1), path)
    return path


def _place(graph: Path, cache: str, out: Path) -> subprocess.CompletedProcess:
    """`placeto place` with a shipped gdp policy of the independent decoder (gdp-nmt: its forward pass is one jitted
    function), JAX's compile log on (it reports persistent-cache hits)."""
    env = {**os.environ, ENV: cache, "JAX_LOG_COMPILES": "1"}
    proc = subprocess.run([sys.executable, "-m", "placeto.cli.main", "place", str(graph), "--checkpoint", "gdp-nmt",
                           "--devices", "2", "--out", str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_second_command_reads_the_warm_cache(tiny_graph, tmp_path):
    cache = tmp_path / "cache"
    first = _place(tiny_graph, str(cache), tmp_path / "p1.json")
    entries = sorted(p.name for p in cache.glob("*-cache"))
    assert any(name.startswith("jit_sample-") for name in entries), entries  # the policy's forward pass
    assert "Persistent compilation cache hit" not in first.stderr
    second = _place(tiny_graph, str(cache), tmp_path / "p2.json")
    assert "Persistent compilation cache hit for 'jit_sample'" in second.stderr
    assert sorted(p.name for p in cache.glob("*-cache")) == entries  # nothing compiled anew
    assert (tmp_path / "p1.json").read_bytes() == (tmp_path / "p2.json").read_bytes()
