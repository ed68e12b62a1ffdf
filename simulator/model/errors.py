"""The one error type for bad input: graphs, placements, clusters.

Every message is a single line that names the file (when there is one) and the offending node or field,
so the CLI can print it as is and exit with status 2.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input: a graph, placement or cluster file, an argument."""

    def __init__(self, message: str, source: str | None = None):
        message = _one_line(str(message))
        self.source = _one_line(str(source)) if source else source
        self.detail = message
        super().__init__(f"{self.source}: {message}" if self.source else message)

    def with_source(self, source: str) -> "InputError":
        """The same error, attributed to `source` if it names none yet."""
        return self if self.source else InputError(self.detail, source)


def _one_line(text: str) -> str:
    """`text` with line breaks escaped: a message stays one line.

    A file or node name may hold a newline.
    """
    return text.replace("\r", "\\r").replace("\n", "\\n")


MAX_MESSAGE = 300  # characters of a user exception's first line kept in the one-line message
TRACEBACK_ENV = "PLACETO_TRACEBACK"  # set to 1: the CLI prints the traceback of an error's cause (as --verbose)


class UserCodeError(InputError):
    """An exception of the user's own code, as a one-line InputError.

    The code is a module, function or args factory named on the command line (`import-jax`, `--program`,
    `--args-spec module:factory`). The line names it, the exception's type and the first line of its message
    (at most MAX_MESSAGE characters); the exception is the __cause__, whose traceback `--verbose` (or
    PLACETO_TRACEBACK=1) prints.
    """

    def __init__(self, what: str, error: BaseException):
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        text = lines[0] if lines else ""
        if len(text) > MAX_MESSAGE:
            text = text[:MAX_MESSAGE - 3] + "..."
        more = " ..." if len(lines) > 1 and not text.endswith("...") else ""
        super().__init__(f"{what} raised {type(error).__name__}{': ' + text if text else ''}{more} (--verbose or "
                         f"{TRACEBACK_ENV}=1 shows the traceback)")
        self.error = error
