"""An unreadable entry of JAX's persistent compilation cache: one warning line, and replaced.

Beside simulator.measure.cache (which sets the cache up), in a module of the standard library's imports only, so
that the rig's workers (simulator.hardware.rig.worker), which compile their stages through the same cache, install
it before importing JAX without importing placeto's cache module.
"""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

# JAX's warning when an entry of its persistent cache cannot be read (jax._src.compiler._cache_read), and where it
# keeps an entry: <directory>/<cache key>-cache (jax._src.lru_cache.LRUCache)
JAX_READ_ERROR = re.compile(r"Error reading persistent compilation cache entry for '([^']*)': (.*)", re.S)
ENTRY_SUFFIX = "-cache"


def heal_compile_cache_reads() -> None:
    """Makes an unreadable compilation cache entry one warning line, and replaced.

    JAX, reading an entry it cannot decompress or deserialize, warns in two lines (its own source line too),
    compiles, and keeps the damaged entry: its cache never overwrites one, so every later command warns and compiles
    again. Here that warning becomes one line naming the entry, and the entry is removed before JAX writes the
    executable it compiles instead, which replaces it. Hooks warnings.showwarning (the documented way to redirect
    warnings) and shows that warning every time (the default shows one per source line and process), without
    importing JAX; installed once per process, other warnings are left to the previous hook.
    """
    if getattr(warnings.showwarning, "_placeto_heals", False):
        return
    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        found = JAX_READ_ERROR.match(str(message))
        if found is None:
            return previous(message, category, filename, lineno, file, line)
        print(healed_entry_line(found.group(1), " ".join(found.group(2).split())[:160], _reading_cache_key()),
              file=sys.stderr, flush=True)

    show._placeto_heals = True  # type: ignore[attr-defined]
    warnings.showwarning = show
    warnings.filterwarnings("always", message=JAX_READ_ERROR.pattern.split("'")[0])


def healed_entry_line(module: str, why: str, key: str | None,
                      directory: Path | None = None) -> str:
    """Removes the unreadable entry of `key` (if it is a file) and says so in one line.

    Args:
      module: the compiled function's name, as JAX's warning gives it ("jit_sample").
      why: why it could not be read, one line.
      key: the entry's cache key (None: not found; then the directory is named, and nothing removed).
      directory: the compilation cache directory (default: the one JAX is configured with).
    """
    if directory is None:
        directory = Path(str(sys.modules["jax"].config.jax_compilation_cache_dir)) if "jax" in sys.modules else None
    entry = directory / f"{key}{ENTRY_SUFFIX}" if directory is not None and key else None
    if entry is not None and (entry.is_file() or entry.is_symlink()):
        try:
            entry.unlink()
            return (f"placeto: warning: compilation cache entry {entry}: unreadable ({why}); removed, compiling "
                    f"{module} again (the new entry replaces it)")
        except OSError as e:
            why = f"{why}; cannot remove it: {e.strerror or e}"
    where = entry if entry is not None else f"of {module} in {directory}"
    return (f"placeto: warning: compilation cache entry {where}: unreadable ({why}); compiling {module} again "
            f"(delete it to rebuild it)")


def _reading_cache_key() -> str | None:
    """The cache key of the entry JAX is reading, from its reading function's frame; None if not found."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.replace("\\", "/").endswith("jax/_src/compiler.py"):
            key = frame.f_locals.get("cache_key")
            if isinstance(key, str) and key:
                return key
        frame = frame.f_back
    return None
