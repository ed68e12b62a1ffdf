"""The one error type for bad input: graphs, placements, clusters.

Every message is a single line that names the file (when there is one) and the offending node or field,
so the CLI can print it as is and exit with status 2.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input (a graph, placement or cluster file, or an argument)."""

    def __init__(self, message: str, source: str | None = None):
        message = _one_line(str(message))
        self.source = _one_line(str(source)) if source else source
        self.detail = message
        super().__init__(f"{self.source}: {message}" if self.source else message)

    def with_source(self, source: str) -> "InputError":
        """The same error, attributed to `source` if it names none yet."""
        return self if self.source else InputError(self.detail, source)


def _one_line(text: str) -> str:
    """Line breaks escaped, so a message naming a file or node with a newline in its name stays one line."""
    return text.replace("\r", "\\r").replace("\n", "\\n")
