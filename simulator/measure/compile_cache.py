"""JAX's persistent compilation cache for every `placeto` command, so a second command compiles little.

A learned-method command compiles its jitted functions (the policy's step, the gdp forward pass) for the padded
size of the graph: seconds of XLA work, the same every time. With the cache on, XLA's executables are written
to disk after the first command and read back by the next one that compiles the same function for the same
shapes (on the same JAX version and machine); tracing still happens, compiling does not.

Where it lives, from the environment variable PLACETO_COMPILE_CACHE:
  unset          jax/ in placeto's cache root: $PLACETO_CACHE (the root of everything placeto caches, also the
                 calibrated clusters of `place --hardware`), else $XDG_CACHE_HOME/placeto, else ~/.cache/placeto
  a path         that directory (created if missing)
  off            no persistent cache (nor the one JAX_COMPILATION_CACHE_DIR would give)
A directory that cannot be created or written is not an error: one warning on stderr, and the command runs
without the cache. Entries are small (about 0.1 MB for a placement command's policy step, one per function and
padded graph size). The directory only grows: JAX's size limit (jax_compilation_cache_max_size) is left unset,
because its least-recently-used bookkeeping (an "-atime" file per entry under a file lock) fails with a
FileNotFoundError warning per compile on entries written without it, e.g. by another JAX program sharing the
directory. Deleting the directory is always safe.
Keep one cache per machine: where a home directory is shared by machines of other CPUs, point
PLACETO_CACHE (or PLACETO_COMPILE_CACHE) at a local directory.

`enable()` (called once at the start of placeto.cli.main.main) sets JAX's own options: through jax.config if JAX is
already imported, and through their JAX_* environment variables otherwise, so that commands that never import
JAX do not pay for its import, and worker processes started by the command inherit the cache.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Mapping, MutableMapping

from simulator.model.errors import InputError

ENV = "PLACETO_COMPILE_CACHE"
ROOT_ENV = "PLACETO_CACHE"
OFF = "off"
MIN_COMPILE_SECONDS = 0.0  # keep every executable: reading one back costs less than compiling the smallest
HELP = ("caches: compiled JAX functions are kept in ~/.cache/placeto/jax (or $XDG_CACHE_HOME/placeto/jax), so "
        "a second\ncommand on a graph of the same size skips most of its compilation; calibrated clusters beside "
        f"them.\n{ROOT_ENV}=DIR moves both, {ENV}=DIR the compilation cache alone, {ENV}={OFF} turns it off.")

_warned = False  # an unusable directory is reported once per process


def cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    """Placeto's cache root (not created here): PLACETO_CACHE if set (an empty value counts as unset), else
    $XDG_CACHE_HOME/placeto when XDG_CACHE_HOME is an absolute path (the XDG rule: a relative one is ignored),
    else ~/.cache/placeto. InputError (one line, naming the variable) where a "~user" in PLACETO_CACHE names no
    user, or there is no home directory to put it under."""
    given = environ.get(ROOT_ENV, "").strip()
    if given:
        return _expand(given, ROOT_ENV)
    xdg = environ.get("XDG_CACHE_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "placeto"
    try:
        return Path.home() / ".cache" / "placeto"
    except RuntimeError as e:  # no HOME and no passwd entry
        raise InputError(f"{e} (set {ROOT_ENV} to a directory)") from None


def _expand(given: str, variable: str) -> Path:
    """`given` (the value of environment `variable`) with ~ expanded, absolute; InputError if ~user is unknown."""
    try:
        return Path(given).expanduser().absolute()
    except RuntimeError as e:  # "~nosuchuser/...", or "~" without a home directory
        raise InputError(f"{variable}={given[:80]}: cannot expand {given.split('/')[0][:40]!r} ({e}); set it to "
                         f"a directory") from None


def cache_dir(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The compilation cache directory (absolute; not created here) that `environ` asks for, or None where it
    says off: PLACETO_COMPILE_CACHE if set (an empty value counts as unset), else cache_root()/jax."""
    given = environ.get(ENV, "").strip()
    if given.lower() == OFF:
        return None
    if given:
        return _expand(given, ENV)
    return cache_root(environ) / "jax"


def usable(path: Path) -> str | None:
    """None if `path` is (or can be made) a directory this process can write files in, else why not (one
    line). Creates the directory and writes and removes one probe file."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".probe-"):
            pass
    except OSError as e:
        return e.strerror or str(e)
    return None


def jax_options(path: Path | None) -> dict[str, object]:
    """JAX config names -> values that turn the persistent cache on in `path`, or off (None)."""
    if path is None:
        return {"jax_enable_compilation_cache": False}
    options: dict[str, object] = {
        "jax_enable_compilation_cache": True,
        "jax_compilation_cache_dir": str(path),
        "jax_persistent_cache_min_compile_time_secs": MIN_COMPILE_SECONDS,
        "jax_persistent_cache_min_entry_size_bytes": -1,  # -1: any size, and JAX may not raise it
    }
    return options


def enable(environ: MutableMapping[str, str] = os.environ) -> Path | None:
    """Point JAX's persistent compilation cache at `cache_dir(environ)`, or turn it off; returns the directory
    in use, or None (off, or unusable: then one warning on stderr, and JAX runs without a persistent cache).

    Call before the first compilation: JAX opens its cache once per process, at the first compile.
    """
    global _warned
    try:
        path = cache_dir(environ)
        problem = None if path is None else usable(path)
    except InputError as e:  # an unknown ~user, or no home directory to put it under
        path, problem = None, str(e)
    if problem is not None:
        if not _warned:
            where = f" {path}" if path is not None else ""
            print(f"placeto: warning: compilation cache{where}: {problem}; running without it "
                  f"(set {ENV} to another directory, or to {OFF})", file=sys.stderr)
            _warned = True
        path = None
    for name, value in jax_options(path).items():
        _set(name, value, environ)
    return path


def _set(name: str, value: object, environ: MutableMapping[str, str]) -> None:
    """One JAX option: in jax.config when JAX is imported, and in `environ` (read by a later `import jax`, and
    inherited by subprocesses)."""
    environ[name.upper()] = str(value).lower() if isinstance(value, bool) else str(value)
    if "jax" in sys.modules:
        sys.modules["jax"].config.update(name, value)
