"""Screenshots of every page of the built book, as a reader's browser shows them.

    python scripts/screenshots.py [--width 1400] [--height 9000] [--out _build/screenshots]

Needs the built HTML (`make book`) and a headless Chromium (Debian/Ubuntu: `apt-get install
chromium`; or set $CHROMIUM to any Chrome/Chromium binary). Each page of _toc.yml is opened
from disk with no network, given time for MathJax to typeset, and saved as
<out>/<page>.png at the given width; the window is tall so that most pages fit whole. The
pages load nothing from the network (MathJax is served from the build), so what the
screenshots show is what an offline reader sees: rendered formulas, the report's verdicts,
the figures at page width.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.book.pages import HTML_DIR, toc_files  # noqa: E402

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome", "chromium-headless-shell")


def chromium() -> str:
    """The Chromium binary: $CHROMIUM, else the first of the usual names on PATH."""
    found = os.environ.get("CHROMIUM") or next((shutil.which(n) for n in CANDIDATES if shutil.which(n)), None)
    if not found:
        raise SystemExit("screenshots: no Chromium found; install one (apt-get install chromium) or set $CHROMIUM")
    return found


def screenshot(browser: str, page: Path, png: Path, width: int, height: int, wait_ms: int) -> None:
    png.parent.mkdir(parents=True, exist_ok=True)
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           "--disable-background-networking", f"--window-size={width},{height}",
           f"--virtual-time-budget={wait_ms}", f"--screenshot={png}", page.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    if proc.returncode != 0 or not png.is_file():
        raise RuntimeError(f"screenshots: Chromium failed on {page}: {proc.stderr[-2000:]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--width", type=int, default=1400, help="window width in CSS pixels (default 1400)")
    ap.add_argument("--height", type=int, default=9000, help="window height (default 9000: most pages whole)")
    ap.add_argument("--wait-ms", type=int, default=15000, help="virtual time for scripts (MathJax) to finish")
    ap.add_argument("--out", type=Path, default=HTML_DIR.parent / "screenshots", help="folder for the PNGs")
    args = ap.parse_args(argv)
    pages = [(entry, HTML_DIR / f"{entry}.html") for entry in toc_files()]
    missing = [str(p) for _, p in pages if not p.is_file()]
    if missing:
        raise SystemExit("screenshots: build the book first (make book); missing: " + ", ".join(missing))
    browser = chromium()
    for entry, page in pages:
        png = args.out / f"{entry}.png"
        screenshot(browser, page, png, args.width, args.height, args.wait_ms)
        print(f"{png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
