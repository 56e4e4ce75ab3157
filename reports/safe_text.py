"""Text from records made safe for the report's files: control characters shown escaped, CSV cells that a
spreadsheet would run as formulas neutralised.

Records are shared between researchers, so every field is text from outside. A field holding ``ESC c`` (reset),
``ESC [2J`` (clear the screen) or an OSC sequence (retitle the window) would reach the terminal of whoever runs
``cat report.md``; a bidirectional override would show a label in another order than it is stored. What counts
as a control character is moco_core.terminal's (the guard on the commands' own output); it is restated here
because ``reports`` imports no other package of ours, and tests/reports/test_escaping.py checks that the two agree
on every code point.

CSV cells follow OWASP's CSV-injection guidance (owasp.org/www-community/attacks/CSV_Injection): a cell starting
with ``=``, ``+``, ``-``, ``@``, tab, carriage return or line feed gets a leading single quote, and every cell is
quoted (its double quotes doubled). Plain numbers (``-1.5``) are left as they are: a spreadsheet reads them as the
numbers they are, not as formulas.
"""

from __future__ import annotations

import re

# C0 controls but newline and tab, DEL, C1 controls, the line and paragraph separators, the bidirectional
# overrides and isolates, lone surrogates: the set of moco_core.terminal.printable.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_UNSAFE_OR_NEWLINE = re.compile(f"{_UNSAFE.pattern[:-1]}\n\t]")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")
_PLAIN_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}.get(code) or (
        f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def printable(text: str, *, newlines: bool = True) -> str:
    """``text`` with every control character shown as its escape (``\\x1b``, ``\\u202e``, ``\\r``).

    ``newlines``: keep line feeds and tabs; False escapes them too (text that must stay on one line).
    """
    return (_UNSAFE if newlines else _UNSAFE_OR_NEWLINE).sub(_escape, text)


def is_plain_number(text: str) -> bool:
    """``12``, ``-1.5``, ``0.999``, ``1e-05``: what the report writes for a number, and reads as one."""
    return _PLAIN_NUMBER.fullmatch(text) is not None


def csv_cell(text: str) -> str:
    """A CSV cell's text: control characters escaped (line feeds kept: the cell is quoted), and a leading single
    quote where the cell would otherwise start a formula."""
    text = printable(text)
    if text.startswith(FORMULA_START) and not is_plain_number(text):
        return "'" + text
    return text
