"""The one kind of error a user sees as a message, never as a traceback.

Every error that bad input or a refused operation raises (a config value, a dataset, a checkpoint, a busy run
directory, a diverging loss) is a :class:`UserError`. The commands print it as one line, ``error: <message>``,
and exit with its ``exit_code``. The message is made one line and bounded here, whatever value it quotes.
"""

from __future__ import annotations

import sys

from moco_core.terminal import printable

MESSAGE_LIMIT = 800  # characters: an error names its value, it never prints a whole expanded one


class UserError(Exception):
    """Bad input, or an operation refused; printed as one line. ``exit_code``: 2 (1 for a failed run)."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class NonFiniteLossError(UserError, RuntimeError):
    """The loss became NaN or infinite; the run stops before anything else is written (exit code 1)."""

    exit_code = 1


def one_line(message: object) -> str:
    """``message`` on one line (line breaks shown as ``\\n``, every control character escaped: see
    :func:`moco_core.terminal.printable`), at most MESSAGE_LIMIT characters."""
    line = printable(message, newlines=False)
    return line if len(line) <= MESSAGE_LIMIT else line[: MESSAGE_LIMIT - 25] + f"... ({len(line)} characters)"


def print_error(message: object) -> None:
    """The suite's one way to report an error: ``error: <message>`` on stderr, one bounded line."""
    print(f"error: {one_line(message)}", file=sys.stderr)
