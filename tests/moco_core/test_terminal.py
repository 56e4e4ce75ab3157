"""Control characters from outside never reach the terminal raw: printable() and the guard on stdout/stderr."""

from __future__ import annotations

import io
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from moco_core.errors import one_line, show
from moco_core.terminal import CLEAR_LINE, EscapingStream, guarded_output, is_printable, printable, write_control


def test_escapes_worked_out_by_hand() -> None:
    assert printable("a\x1b[2Jb") == "a\\x1b[2Jb"  # clear screen
    assert printable("\x1b]0;title\x07") == "\\x1b]0;title\\x07"  # OSC: retitle the window
    assert printable("\x1bc") == "\\x1bc"  # reset the terminal
    assert printable("x\x9b31m") == "x\\x9b31m"  # C1 CSI, one byte on some terminals
    assert printable("\u202eevil") == "\\u202eevil"  # right-to-left override
    assert printable("over\rwrite") == "over\\rwrite"
    assert printable("bad\udcffname") == "bad\\udcffname"  # an undecodable byte of a file name
    assert printable("\x7f\x00") == "\\x7f\\x00"
    assert printable("two\nlines\tand tab") == "two\nlines\tand tab"
    assert printable("two\nlines\tand tab", newlines=False) == "two\\nlines\\tand tab"
    assert printable("é✓ 日本 ok") == "é✓ 日本 ok"  # printable text is left alone


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.characters(codec=None, exclude_categories=())))
def test_any_text_comes_out_printable_and_safe_text_unchanged(text: str) -> None:
    out = printable(text)
    assert is_printable(out) and is_printable(printable(text, newlines=False), newlines=False)
    assert "\x1b" not in out and "\r" not in out
    if is_printable(text):
        assert out == text


def test_the_guard_escapes_what_is_printed_and_passes_our_controls() -> None:
    raw = io.StringIO()
    stream = EscapingStream(raw)  # type: ignore[arg-type]
    print("file \x1b[2J.png", file=stream)
    write_control(stream, CLEAR_LINE)
    stream.write("step 3")
    assert raw.getvalue() == "file \\x1b[2J.png\n" + CLEAR_LINE + "step 3"
    plain = io.StringIO()
    write_control(plain, CLEAR_LINE)  # not guarded: written as it is
    assert plain.getvalue() == CLEAR_LINE


def test_the_guards_cover_print_logging_warnings_and_tracebacks() -> None:
    script = (
        "import logging, sys, warnings\n"
        "from moco_core.terminal import guard_process_output, guarded_output\n"
        "with guarded_output():\n"
        "    print('out \\x1b[2J')\n"
        "    logging.getLogger('moco.data').warning('cannot decode %s', '\\x1b]0;pwned\\x07.png')\n"
        "    warnings.warn('warned \\x1bc')\n"
        "guard_process_output()  # what cli.main() does: the traceback is printed after everything returned\n"
        "raise ValueError('raised \\u202e\\x1b[31m')\n"
    )
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert "\x1b" not in res.stdout + res.stderr and "\u202e" not in res.stderr
    assert "out \\x1b[2J" in res.stdout
    for shown in ("\\x1b]0;pwned\\x07.png", "warned \\x1bc", "raised \\u202e\\x1b[31m"):
        assert shown in res.stderr


def test_guarded_output_restores_the_streams() -> None:
    before = sys.stdout, sys.stderr
    with guarded_output(), guarded_output():
        assert isinstance(sys.stdout, EscapingStream) and not isinstance(sys.stdout.wrapped, EscapingStream)
    assert (sys.stdout, sys.stderr) == before


def test_error_lines_and_shown_values_are_bounded_and_escaped() -> None:
    assert one_line("a\x1b[2J\nb") == "a\\x1b[2J\\nb"
    nested: list = []
    for _ in range(30):
        nested = [nested] * 50  # 50**30 leaves once expanded: repr() of it would never finish
    assert len(show(nested)) <= 120
    assert "..." in show("x" * 10_000) and len(show("x" * 10_000)) <= 120
