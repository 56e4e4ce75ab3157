"""The one kind of error a user sees as a message, never as a traceback.

Every error that bad input or a refused operation raises (a config value, a dataset, a checkpoint, a busy run
directory, a diverging loss) is a :class:`UserError`. The commands print it as one line, ``error: <message>``,
and exit with its ``exit_code``. The message is made one line and bounded here, whatever value it quotes.
"""

from __future__ import annotations

import re
import reprlib
import sys

from moco_core.terminal import printable

MESSAGE_LIMIT = 800  # characters: an error names its value, it never prints a whole expanded one


class UserError(Exception):
    """Bad input, or an operation refused; printed as one line. ``exit_code``: 2 (1 for a failed run)."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(one_line(from_worker(message)))


_WORKER = re.compile(r"Caught \w+ in DataLoader worker process \d+\.\nOriginal Traceback \(most recent call last\):\n")


def from_worker(message: object) -> object:
    """The message a UserError raised in a DataLoader worker had there. torch raises it again in the main process
    with the worker's whole traceback as its message ("Caught DatasetError in DataLoader worker process 0.
    Original Traceback ..."), which would print as a traceback; its last line, ``module.Class: message``, is the
    error the user is owed. Any other message is returned as it is."""
    if not isinstance(message, str) or not _WORKER.match(message):
        return message
    last = message.rstrip().rsplit("\n", 1)[-1]
    name, colon, said = last.partition(": ")
    return said if colon and " " not in name else message


class NonFiniteLossError(UserError, RuntimeError):
    """The loss became NaN or infinite; the run stops before anything else is written (exit code 1)."""

    exit_code = 1


def one_line(message: object) -> str:
    """``message`` on one line (line breaks shown as ``\\n``, every control character escaped: see
    :func:`moco_core.terminal.printable`), at most MESSAGE_LIMIT characters."""
    line = printable(message, newlines=False)
    return line if len(line) <= MESSAGE_LIMIT else line[: MESSAGE_LIMIT - 25] + f"... ({len(line)} characters)"


_SHOW = reprlib.Repr()  # keyword arguments need Python 3.12
_SHOW.maxlevel, _SHOW.maxstring, _SHOW.maxlong, _SHOW.maxother = 3, 120, 40, 60
_SHOW.maxtuple = _SHOW.maxlist = _SHOW.maxarray = _SHOW.maxdict = _SHOW.maxset = _SHOW.maxfrozenset = 6
_SHOW.maxdeque = 6


def show(value: object, limit: int = 120) -> str:
    """``value`` as an error message quotes it: repr'd, at most ``limit`` characters, and bounded in the work too.

    A value can be huge (a YAML list of a million numbers, anchors that nest a billion references): repr'ing it
    whole, then cutting, costs gigabytes; reprlib stops after a few levels and items.
    """
    shown = _SHOW.repr(value)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def print_error(message: object) -> None:
    """The suite's one way to report an error: ``error: <message>`` on stderr, one bounded line."""
    print(f"error: {one_line(message)}", file=sys.stderr)


def print_warning(message: object) -> None:
    """The suite's one way to warn: ``warning: <message>`` on stderr, one bounded line, control characters of a
    path or a file's text escaped as in errors."""
    print(f"warning: {one_line(message)}", file=sys.stderr)
