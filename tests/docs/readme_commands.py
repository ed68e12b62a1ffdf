"""The shell commands of the README and docs/ as data: fenced ```bash blocks, split into commands.

Used by tests/docs/test_readme.py, which runs every README block (with small budgets) and checks every `placeto`
command's flags, in the README and in docs/*.md, against the CLI's parser.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block: its file, first line (1-based), language and text."""

    path: Path
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"


def code_blocks(path: Path) -> list[Block]:
    """Every fenced code block of a Markdown file, in order."""
    blocks, lang, start, body = [], None, 0, []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        m = FENCE.match(line.strip())
        if lang is None and m:
            lang, start, body = m.group(1), i, []
        elif lang is not None and line.strip() == "```":
            blocks.append(Block(path, start, lang, "\n".join(body)))
            lang = None
        elif lang is not None:
            body.append(line)
    if lang is not None:
        raise ValueError(f"{path}:{start}: unclosed code block")
    return blocks


def commands(text: str) -> list[str]:
    """The commands of a shell block: continuation lines joined, comments and blank lines dropped."""
    out, pending = [], ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if pending:
            line = pending + " " + line.lstrip()
            pending = ""
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
            continue
        code = strip_comment(line).strip()
        if code:
            out.append(code)
    return out


def strip_comment(line: str) -> str:
    """`line` without its shell comment (a # outside quotes, at the start or after a space)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def placeto_invocation(command: str) -> tuple[list[str], list[str]] | None:
    """(subcommand path, flags) of a `placeto ...` command, e.g. (["graph", "info"], []) or (["train"],
    ["--family", "--out"]); None for other commands."""
    words = shlex.split(command)
    if not words or words[0] != "placeto":
        return None
    path = []
    for w in words[1:]:
        if w.startswith("-"):
            break
        path.append(w)
    flags = [w.split("=", 1)[0] for w in words[1:] if w.startswith("--")]
    return path, flags
