"""A run directory's metrics.csv, read back: on resume (kept rows, healed) and for plots (one-line errors).

Every method's `train` appends one row per update to <run>/metrics.csv, a CSV with a header naming the columns,
one of them "update"; a resumed run first drops the rows logged after the checkpoint it resumes from. The file is a
log, not state: the checkpoint is what a run resumes from. So a damaged log never stops a resume:

* a file that is not UTF-8 CSV text with an "update" column (random bytes, one Latin-1 character, an overlong
  field) is set aside as metrics.csv.damaged, named in one warning, and a new log starts;
* rows that do not parse (another number of columns than the header, a NUL byte, an update that is not a whole
  number) are
  dropped, counted in one warning; the others are kept.

`placeto plot` reads the same file and refuses an unreadable one in one line naming it.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple, Sequence

from simulator.model.errors import InputError
from simulator.model.io import atomic_write_bytes

METRICS = "metrics.csv"
DAMAGED_SUFFIX = ".damaged"  # a damaged log is moved to metrics.csv.damaged
UPDATE = "update"


FIELD_LIMIT = 131_072  # characters a field may hold: csv's default, set for each read (it is process-wide state)


@contextlib.contextmanager
def csv_field_limit(limit: int) -> Iterator[None]:
    """csv's field size limit (process-wide) at `limit` inside the block, restored after it."""
    before = csv.field_size_limit(limit)
    try:
        yield
    finally:
        csv.field_size_limit(before)


class Table(NamedTuple):
    """A metrics.csv as read: its header and its rows, each as long as the header."""

    header: list[str]  # column names; "update" among them
    rows: list[list[str]]  # one list of len(header) strings per row, in file order
    damaged: list[list[str]] = []  # rows left out: not len(header) fields, or a NUL byte (blank lines are not rows)


def read_table(path: Path) -> Table:
    """`path`'s header and rows.

    Rows with another number of fields than the header, or a NUL byte (the zeros a crash leaves at a file's end),
    are left out of `rows`, into `damaged` (a row cut by a kill mid-write, a hand edit).

    Raises:
      InputError: (naming `path`) it cannot be read, is not UTF-8 text, not CSV (a NUL byte, a field over
        FIELD_LIMIT characters) or has no "update" column.
    """
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", str(path)) from None
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})", str(path)) from None
    try:
        with csv_field_limit(FIELD_LIMIT):  # whatever another reader of this process set
            raw = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as e:
        raise InputError(f"not CSV ({e})", str(path)) from None
    if not raw or UPDATE not in raw[0]:
        raise InputError(f"no header with an {UPDATE!r} column", str(path))
    header, rows = raw[0], [r for r in raw[1:] if r]
    sound = [len(r) == len(header) and not any("\0" in x for x in r) for r in rows]
    return Table(header, [r for r, ok in zip(rows, sound) if ok], [r for r, ok in zip(rows, sound) if not ok])


def resumed_rows(out: Path, keep: Callable[[int], bool], warn: Callable[[str], None] | None = None) -> Table | None:
    """The rows of <out>/metrics.csv a resumed run keeps, the file rewritten to hold just them.

    Args:
      out: the run directory.
      keep: update -> whether its row stays (rows logged after the resumed checkpoint do not).
      warn: where the one warning of a damaged log goes (default stderr).

    Returns:
      The kept Table (the file rewritten with it, atomically), or None: no file, or a damaged one, set aside as
      metrics.csv.damaged with one warning (the caller starts a new log).
    """
    warn = warn or _stderr
    path = out / METRICS
    if not path.exists() and not path.is_symlink() or path.is_file() and path.stat().st_size == 0:
        return None  # no log yet (an empty one: killed before its first row)
    try:
        table = read_table(path)
    except InputError as e:
        aside = path.with_name(METRICS + DAMAGED_SUFFIX)
        try:
            os.replace(path, aside)
        except OSError as moved:
            raise InputError(f"damaged, {e.detail}, and cannot be set aside: {moved.strerror or moved}; remove it "
                             f"to resume", str(path)) from None
        warn(f"placeto: warning: {path}: damaged, {e.detail}; set aside as {aside.name}, a new log starts (the "
             f"checkpoint is intact)")
        return None
    at = table.header.index(UPDATE)
    rows = [r for r in table.rows if _update(r, at) is not None and keep(_update(r, at))]
    # damaged: what does not parse, unless its update says it goes anyway (a row cut by a kill after the checkpoint)
    dropped = sum(_update(r, at) is None for r in table.rows) + sum(
        _update(r, at) is None or keep(_update(r, at)) for r in table.damaged)
    if dropped:
        warn(f"placeto: warning: {path}: {dropped} damaged row{'s' if dropped != 1 else ''} dropped (not "
             f"{len(table.header)} fields, a NUL byte, or no whole update number); {len(rows)} kept")
    kept = Table(table.header, rows)
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([kept.header] + kept.rows)
    atomic_write_bytes(path, buf.getvalue().encode())
    return kept


@contextlib.contextmanager
def naming(path: Path) -> Iterator[None]:
    """An OSError raised inside without a file name (a write or flush on a full disk: ENOSPC) gets `path` as its.

    So that the command's one line says which file could not be written (placeto.cli.main prints
    "<filename>: <strerror>").
    """
    try:
        yield
    except OSError as e:
        if e.filename is None:
            e.filename = str(path)
        raise


class Appender:
    """metrics.csv opened for appending rows of `fields`; every write names the file when it fails."""

    def __init__(self, path: Path, fields: Sequence[str]):
        self.path = path
        with naming(path):
            self.file = open(path, "a", newline="")
        self.csv = csv.DictWriter(self.file, fields, extrasaction="ignore", lineterminator="\n")

    def writerow(self, row: dict[str, Any]) -> None:
        with naming(self.path):
            self.csv.writerow(row)

    def flush(self) -> None:
        with naming(self.path):
            self.file.flush()

    def close(self) -> None:
        with naming(self.path):
            self.file.close()

    def __enter__(self) -> "Appender":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _update(row: list[str], at: int) -> int | None:
    """The row's update number (field `at`), or None: missing, or not a whole number in ASCII digits."""
    text = row[at].strip() if at < len(row) else ""
    return int(text) if text.isascii() and text.isdigit() else None


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
