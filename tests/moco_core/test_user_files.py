"""moco_core/user_files.py: the one reader of files a user names, over the hostile values of issue 46."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from moco_core.errors import UserError
from moco_core.user_files import inside, parse_json, read_bytes, read_json, read_text, regular_file


class MyError(UserError):
    pass


@pytest.mark.parametrize("text", [
    "9" * 5000,  # Python's own parser: ValueError, Exceeds the limit (4300 digits)
    "9" * 400,  # parses, then OverflowError at float()
    '{"top1": ' + "1" * 400 + "}",
    "[" + "-" + "7" * 30 + "]",
    str(1 << 63),  # one past int64
    "1e400",  # a finite literal beyond a double
    '{"a": -1e999}',
    "[" * 100_000 + "]" * 100_000,  # deeper than the parser recurses
    '{"a": 1',
    "\ufeff{}".encode("utf-16"),
])
def test_malformed_json_is_one_error_line(text: str | bytes) -> None:
    with pytest.raises(MyError, match=r"^x: malformed JSON \(") as caught:
        parse_json(text, what="x", error=MyError)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 200


@pytest.mark.parametrize(("text", "value"), [
    (str((1 << 63) - 1), (1 << 63) - 1),  # the int64 edges parse
    (str(-(1 << 63)), -(1 << 63)),
    ("1.7976931348623157e308", 1.7976931348623157e308),
    ('{"a": NaN, "b": [Infinity]}', None),  # the constants Python writes stay allowed
    ("12345678901234567890", None),  # 20 digits: beyond int64, refused below
])
def test_numbers_at_the_edges(text: str, value: object) -> None:
    if text == "12345678901234567890":
        with pytest.raises(UserError, match="beyond 64 bits"):
            parse_json(text)
        return
    parsed = parse_json(text)
    if value is not None:
        assert parsed == value


def test_regular_files_only(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(MyError, match="is a FIFO, not a regular file"):
        read_text(fifo, limit=100, what="subset file", error=MyError)  # would block for ever if opened
    with pytest.raises(MyError, match="is a device"):
        read_bytes("/dev/zero", limit=100, error=MyError)  # would grow without end
    with pytest.raises(MyError, match="is a directory"):
        regular_file(tmp_path, error=MyError)
    with pytest.raises(MyError, match="not found"):
        read_json(tmp_path / "none.json", error=MyError)
    link = tmp_path / "link"
    link.symlink_to("/dev/zero")
    with pytest.raises(MyError, match="is a device"):
        read_bytes(link, limit=100, error=MyError)


def test_size_limit(tmp_path: Path) -> None:
    path = tmp_path / "list.txt"
    path.write_bytes(b"a" * 101)
    with pytest.raises(UserError, match="larger than 100 bytes"):
        read_bytes(path, limit=100)
    assert read_bytes(path, limit=101) == b"a" * 101
    path.write_bytes("caf\u00e9\n".encode("utf-8-sig"))
    assert read_text(path, limit=100) == "caf\u00e9\n"
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(UserError, match="not UTF-8"):
        read_text(path, limit=100)


@pytest.mark.parametrize("name", ["../../../etc/passwd", "/etc/passwd", "a/../../b", "..", "a\x00b", "", 7])
def test_names_that_leave_their_folder(tmp_path: Path, name: object) -> None:
    with pytest.raises(MyError):
        inside(tmp_path, name, error=MyError)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "rel"), [("a/b.jpg", "a/b.jpg"), ("a/../b.jpg", "b.jpg"), ("./c.png", "c.png"),
                                           ("..a/b", "..a/b")])
def test_names_that_stay(tmp_path: Path, name: str, rel: str) -> None:
    assert inside(tmp_path, name) == tmp_path / rel
