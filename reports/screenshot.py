"""Render an HTML report to a PNG with headless Chromium, to look at what a browser shows.

    python -m reports.screenshot report/report.html /tmp/report.png [--width 1200 --height 2000]

Needs a ``chromium`` (or ``chromium-browser``, ``google-chrome``) executable; :func:`find_chromium` returns None
where there is none, and :func:`screenshot` raises ``FileNotFoundError`` then.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The first Chromium-like browser on PATH, or None."""
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def screenshot(html: Path, png: Path, *, width: int = 1200, height: int = 2000, timeout: float = 120.0) -> Path:
    """Write a ``width`` x ``height`` screenshot of ``html`` to ``png``; returns ``png``."""
    browser = find_chromium()
    if browser is None:
        raise FileNotFoundError(f"no Chromium found on PATH (tried {', '.join(BROWSERS)})")
    png = png.resolve()
    png.parent.mkdir(parents=True, exist_ok=True)
    png.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="moco-report-chromium-") as profile:
        command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                   f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={width},{height}",
                   html.resolve().as_uri()]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if not png.is_file():
        raise RuntimeError(f"chromium wrote no screenshot (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return png


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Screenshot an HTML report with headless Chromium.")
    parser.add_argument("html", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--width", type=int, default=1200)
    parser.add_argument("--height", type=int, default=2000)
    args = parser.parse_args(argv)
    print(screenshot(args.html, args.png, width=args.width, height=args.height))


if __name__ == "__main__":
    main()
