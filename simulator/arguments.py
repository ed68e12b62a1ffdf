"""Command-line argument types with ranges, and a parser whose errors are one line.

Every number a command takes is range-checked when parsed (so `--seed 99999999999999999999999` is a usage error,
not an OverflowError deep in JAX), and argparse's usage errors print one line, `PROG: error: ...`, with exit
status 2 like every other bad input. The `placeto` command line (placeto.cli.arguments) and the world's own
entry points (the plain jit child, simulator.hardware.plain_jit) share them.
"""

from __future__ import annotations

import argparse
import difflib
import math
import re
import sys
from typing import Callable, Iterable, Sequence

class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Help that shows every default and keeps descriptions as written.

    ArgumentDefaultsHelpFormatter (every default shown: " (default: 4)", a list as "2,4,8") that keeps
    pre-formatted descriptions and epilogs as written. Defaults that say nothing (None, False, an empty list) are
    left to the help text, which says what happens without the argument.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "%(default)" in text or not shows_default(action):
            return text
        return f"{text} (default: {format_default(action.default).replace('%', '%%')})"


def shows_default(action: argparse.Action) -> bool:
    """Whether HelpFormatter appends `action`'s default to its help.

    A default that means something, on an option (or a positional that may be left out).
    """
    if action.default is None or action.default is False or action.default == [] or \
            action.default is argparse.SUPPRESS or action.help is argparse.SUPPRESS:
        return False
    return bool(action.option_strings) or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE)


def format_default(value: object) -> str:
    """A default as the user would type it: sequences comma-separated."""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, exit status 2.

    On stderr, no usage block; its help shows every default (HelpFormatter). Its subparsers are OneLineParsers too
    (argparse makes them of the parent's class), so both hold for every subcommand.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # noqa: D102  (argparse's hook)
        text = " ".join(message.split())
        choice = re.match(r"(argument \S+: invalid choice: '(.*?)') (\(choose from (.*)\))$", text)
        if choice:  # "(did you mean 'nmt'?)" before the choices
            hint = did_you_mean(choice.group(2), re.findall(r"'([^']*)'", choice.group(4)))
            text = f"{choice.group(1)}{hint} {choice.group(3)}"
        sys.stderr.write(f"{self.prog}: error: {text} (see {self.prog} --help)\n")
        sys.exit(2)

    def parse_args(self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None):
        """argparse's, but unrecognized arguments are the chosen subcommand's error.

        "placeto place: error: unrecognized arguments: --secs 1 (did you mean --seconds?) (see placeto place
        --help)": argparse reports them from the top-level parser, which names neither the subcommand nor its
        options.
        """
        args = sys.argv[1:] if args is None else list(args)
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = self._chosen(args)
            options = [o for o in parser._option_string_actions if o.startswith("--")]
            hints = [did_you_mean(x.split("=", 1)[0], options, quote=False) for x in extras if x.startswith("--")]
            parser.error(f"unrecognized arguments: {' '.join(extras)}{''.join(h for h in hints if h)}")
        return parsed

    def _chosen(self, args: Sequence[str]) -> argparse.ArgumentParser:
        """The (sub)parser `args` select: each word that names a subcommand of the parser so far, followed."""
        parser: argparse.ArgumentParser = self
        for word in args:
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if subs and word in subs[0].choices:
                parser = subs[0].choices[word]
        return parser


def did_you_mean(word: str, choices: Iterable[str], quote: bool = True) -> str:
    """" (did you mean 'nmt'?)" for the choice closest to `word`, or "" when none is close (difflib's ratio 0.6)."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    if not close:
        return ""
    return f" (did you mean {close[0]!r}?)" if quote else f" (did you mean {close[0]}?)"


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: an integer in [lo, hi].

    Checked on the digits: no huge int is built.
    """

    def parse(text: str) -> int:
        digits = text.strip().lstrip("+-")
        if not digits.isdigit() or len(digits) > 30:
            raise argparse.ArgumentTypeError(f"expected an integer in [{lo}, {hi}], got {text[:40]!r}")
        value = int(text)
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"expected an integer in [{lo}, {hi}], got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def float_in(lo: float, hi: float, lo_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite float in [lo, hi].

    With `lo_open`: in (lo, hi].
    """
    span = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number in {span}, got {text[:40]!r}") from None
        if not (math.isfinite(value) and lo <= value <= hi) or (lo_open and value == lo):
            raise argparse.ArgumentTypeError(f"expected a number in {span}, got {text[:40]!r}")
        return value

    parse.__name__ = "number"
    return parse


def comma_list(item: Callable[[str], object]) -> Callable[[str], list]:
    """An argparse type: comma-separated values, each parsed by `item`.

    E.g. int_in(1, 8); at least one value.
    """

    def parse(text: str) -> list:
        parts = [t for t in text.split(",") if t.strip()]
        if not parts:
            raise argparse.ArgumentTypeError(f"expected comma-separated values, got {text[:40]!r}")
        return [item(t) for t in parts]

    parse.__name__ = f"comma-separated {getattr(item, '__name__', 'value')}s"
    return parse


COUNT = int_in(0, 10**9)  # episodes, samples, warm-up runs
POSITIVE = int_in(1, 10**9)  # repeats, groups, budgets
