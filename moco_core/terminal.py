"""What reaches a terminal: text from outside (file names, record fields, config values) with its control
characters shown escaped, never sent raw.

A file name can hold ``ESC [2J`` (clear the screen), an OSC sequence (retitle the window, write to the clipboard
on some terminals) or ``ESC c`` (reset). Escaping it at each place that prints a name would miss the next place,
so the commands put one guard on ``sys.stdout`` and ``sys.stderr`` for the length of the command
(:func:`guarded_output`): everything written through them, ``print``, logging, warnings and tracebacks alike, has
its control characters replaced by their escapes (``\\x1b``). The suite's own terminal controls (the progress line's
carriage return and erase) go through :func:`write_control`, which the guard lets pass.

Escaped: C0 controls but newline and tab, DEL, C1 controls (U+0080-U+009F: 0x9B is a one-byte CSI on some
terminals), the Unicode line and paragraph separators, the bidirectional overrides and isolates (text shown in
another order than it is stored, arXiv 2111.00169), and lone surrogates (undecodable bytes of a file name).
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from collections.abc import Iterator
from typing import Any, TextIO

CLEAR_LINE = "\r\033[K"  # back to the start of a terminal's line, and erase it

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_UNSAFE_OR_NEWLINE = re.compile(f"{_UNSAFE.pattern[:-1]}\n\t]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}.get(code) or (
        f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def printable(text: object, *, newlines: bool = True) -> str:
    """``str(text)`` with every control character shown as its escape (``\\x1b``, ``\\u202e``, ``\\r``).

    ``newlines``: keep line breaks and tabs (for text of several lines); False escapes them too (one line).
    """
    return (_UNSAFE if newlines else _UNSAFE_OR_NEWLINE).sub(_escape, str(text))


def is_printable(text: str, *, newlines: bool = True) -> bool:
    return (_UNSAFE if newlines else _UNSAFE_OR_NEWLINE).search(text) is None


class EscapingStream:
    """A text stream that escapes control characters in what is written to it (:func:`printable`); the rest of
    the stream's interface (``isatty``, ``fileno``, ``encoding``, ``buffer``...) is the wrapped stream's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    @property
    def wrapped(self) -> TextIO:
        return self._stream

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # as a text stream does: click probes streams with write(b"")
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self._stream.write(printable(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def write_control(self, text: str) -> None:
        """Write the suite's own terminal controls (``CLEAR_LINE``) as they are."""
        self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def write_control(stream: TextIO, text: str) -> None:
    """Write ``text``, one of the suite's own terminal controls, to ``stream``: raw through a guard."""
    (getattr(stream, "write_control", None) or stream.write)(text)


def guard(stream: TextIO) -> TextIO:
    return stream if isinstance(stream, EscapingStream) else EscapingStream(stream)  # type: ignore[return-value]


class _CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """The suite's warnings and notes (loggers ``moco.*``), as the bare message, on whatever ``sys.stderr`` is when
    they are emitted (the guard, a test's capture): not to logging's last resort, which a library or a test
    harness that configures the root logger would take away."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


_LOGGER = logging.getLogger("moco")


@contextlib.contextmanager
def guarded_output() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` escape control characters until the block ends (nested: one guard), and the
    ``moco`` loggers' messages go to ``sys.stderr``."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = guard(out), guard(err)
    handler, propagate = _CurrentStderr(), _LOGGER.propagate
    outermost = not any(isinstance(h, _CurrentStderr) for h in _LOGGER.handlers)
    if outermost:
        _LOGGER.addHandler(handler)
        _LOGGER.propagate = False
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
        if outermost:
            _LOGGER.removeHandler(handler)
            _LOGGER.propagate = propagate


def guard_process_output() -> None:
    """Guard ``sys.stdout`` and ``sys.stderr`` for the rest of this process (a spawned rank, a job's process), with
    the ``moco`` loggers' messages on ``sys.stderr``."""
    sys.stdout, sys.stderr = guard(sys.stdout), guard(sys.stderr)
    if not any(isinstance(h, _CurrentStderr) for h in _LOGGER.handlers):
        _LOGGER.addHandler(_CurrentStderr())
        _LOGGER.propagate = False
