"""Text from records made safe for the report's files: control characters shown escaped, CSV cells that a
spreadsheet would run as formulas neutralised.

Records are shared between researchers, so every field is text from outside. A field holding ``ESC c`` (reset),
``ESC [2J`` (clear the screen) or an OSC sequence (retitle the window) would reach the terminal of whoever runs
``cat report.md``; a bidirectional override would show a label in another order than it is stored. What counts
as a control character, and its escape, are moco_core.terminal's (:func:`moco_core.terminal.printable`, the guard
on the commands' own output, torch-free): one set for the terminal and the report.

CSV cells follow OWASP's CSV-injection guidance (owasp.org/www-community/attacks/CSV_Injection): a cell starting
with ``=``, ``+``, ``-``, ``@``, tab, carriage return or line feed gets a leading single quote, and every cell is
quoted (its double quotes doubled). Plain numbers (``-1.5``) are left as they are: a spreadsheet reads them as the
numbers they are, not as formulas.
"""

from __future__ import annotations

import re

from moco_core.terminal import printable

FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")
_PLAIN_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


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
