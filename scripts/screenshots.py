"""Screenshots of every page of the built book, as a reader's browser shows them, and what overflows.

    python scripts/screenshots.py [--width 1400] [--out _build/screenshots] [--html _build/html] [PAGE ...]

Needs the built HTML (`make book`) and a headless Chromium (Debian/Ubuntu: `apt-get install
chromium`; or set $CHROMIUM to any Chrome/Chromium binary). It is a check a person runs, not a
test: nothing in `make test` needs a browser.

Each page of _toc.yml (or each PAGE given, e.g. `chapters/modes`) is opened from disk with no
network, in a window `--width` CSS pixels wide, given time for MathJax to typeset, and saved whole
as <out>/<page>.png: the script measures the page's height first and captures all of it, however
tall (the browser is driven through its DevTools protocol by a small websocket client below, so
nothing beyond the standard library is needed). In the same page it measures, with JavaScript,
every table, every display equation (MathJax), every code output and every figure whose content
is wider than the space the article column gives it (scrollWidth above the column's or its own
clientWidth), and writes them to <out>/overflow.json, one list per page; each entry names the
element, its width and the column's, and the start of its text. Pages with overflowing elements
are listed on the terminal. The pages load nothing from the network (MathJax is served from the
build), so the screenshots show what an offline reader sees.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.book.pages import HTML_DIR, toc_files  # noqa: E402

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome", "chromium-headless-shell")
TILE_PX = 8000  # a screenshot is captured in tiles of at most this height and stitched (GPU texture limits)

# What overflows the article column, measured in the page. An element overflows when its content is
# wider than the box the page gives it (scrollWidth > clientWidth: it scrolls or is cut), or when its
# right edge passes the right edge of the article column. Each is marked `scrolls` when the reader can
# scroll it into view sideways (it, or a box around it that ends within the column, has overflow-x auto
# or scroll), else it is cut.
MEASURE_JS = r"""
(() => {
  const article = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const box = article.getBoundingClientRect(), pad = getComputedStyle(article);
  const column = {left: box.left + parseFloat(pad.paddingLeft), right: box.right - parseFloat(pad.paddingRight)};
  column.width = column.right - column.left;  // the content box: the column text and figures are set in
  const out = [];
  const seen = new Set();
  const scrolls = (el) => {  // el, or a box around it within the column, scrolls sideways
    for (let node = el; node && node !== article; node = node.parentElement) {
      const x = getComputedStyle(node).overflowX;
      if ((x === 'auto' || x === 'scroll') && node.getBoundingClientRect().right <= column.right + 1) return true;
    }
    return false;
  };
  const kinds = [
    ['table', 'table'],
    ['equation', 'mjx-container[display="true"], div.math'],
    ['output', 'div.output pre, div.cell_output pre, .output_area pre'],
    ['figure', 'img'],
  ];
  for (const [kind, selector] of kinds) {
    for (const el of document.querySelectorAll(selector)) {
      if (seen.has(el) || !el.offsetParent) continue;
      seen.add(el);
      const rect = el.getBoundingClientRect();
      const inner = el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).display !== 'inline';
      const past = rect.right > column.right + 1;
      const content = Math.max(el.scrollWidth, rect.width);
      if (inner || past) {
        out.push({kind, scrolls: scrolls(el), width_px: Math.round(content), visible_px: Math.round(Math.min(el.clientWidth || rect.width,
                  column.right - rect.left)), column_px: Math.round(column.width),
                  // the first 80 characters, not UTF-16 units: a cut through a surrogate pair (MathJax's
                  // math alphanumerics, U+1D400 on) would leave half a character that no encoder accepts
                  text: Array.from((el.innerText || el.getAttribute('alt') || '').replace(/\s+/g, ' ').trim())
                        .slice(0, 80).join('')});
      }
    }
  }
  const style = (sel) => { const el = document.querySelector(sel); if (!el) return null;
    const s = getComputedStyle(el); return {font_size: s.fontSize, font_family: s.fontFamily,
    padding: s.paddingLeft + ' ' + s.paddingRight}; };
  return {overflows: out, column_px: Math.round(column.width),
          fonts: {body: style('article p'), table_cell: style('article td'), table_header: style('article th'),
                  output: style('div.cell_output pre, div.output pre')},
          height_px: Math.ceil(document.documentElement.scrollHeight)};
})()
"""


def readable(text: str) -> str:
    """``text`` as a string every encoder accepts: surrogate pairs (UTF-16 halves of one character, as
    JavaScript strings hold MathJax's math alphanumerics such as U+1D43F) joined into their character, a
    lone half (a JavaScript slice through a pair) replaced by U+FFFD."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def readable_measure(measured):
    """:func:`readable` applied to every string of a measurement (dicts and lists walked)."""
    if isinstance(measured, str):
        return readable(measured)
    if isinstance(measured, dict):
        return {readable(k): readable_measure(v) for k, v in measured.items()}
    if isinstance(measured, list):
        return [readable_measure(v) for v in measured]
    return measured


def chromium() -> str:
    """The Chromium binary: $CHROMIUM, else the first of the usual names on PATH."""
    found = os.environ.get("CHROMIUM") or next((shutil.which(n) for n in CANDIDATES if shutil.which(n)), None)
    if not found:
        raise SystemExit("screenshots: no Chromium found; install one (apt-get install chromium) or set $CHROMIUM")
    return found


class DevTools:
    """A minimal client of Chromium's DevTools protocol over one websocket (RFC 6455, client side:
    masked text frames out, unmasked frames in, continuation frames joined)."""

    def __init__(self, url: str, timeout: float = 120.0):
        host_port, path = url.removeprefix("ws://").split("/", 1)
        host, port = host_port.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
                          .encode())
        reply = b""
        while b"\r\n\r\n" not in reply:
            reply += self.sock.recv(4096)
        if b" 101 " not in reply.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"screenshots: the browser refused the websocket: {reply[:200]!r}")
        self.buffer = reply.split(b"\r\n\r\n", 1)[1]
        self.next_id = 0

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("screenshots: the browser closed the connection")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def _frame(self) -> tuple[int, bool, bytes]:
        b0, b1 = self._read(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", self._read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self._read(8))[0]
        mask = self._read(4) if b1 & 0x80 else None
        payload = self._read(n)
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return b0 & 0x0F, bool(b0 & 0x80), payload

    def _message(self) -> dict:
        parts, opcode = [], None
        while True:
            op, fin, payload = self._frame()
            if op == 0x9:  # ping
                continue
            if op == 0x8:
                raise ConnectionError("screenshots: the browser closed the websocket")
            opcode = opcode or op
            parts.append(payload)
            if fin:
                return json.loads(b"".join(parts).decode())

    def send(self, method: str, **params) -> dict:
        """Call ``method`` and return its result (events that arrive meanwhile are skipped)."""
        self.next_id += 1
        data = json.dumps({"id": self.next_id, "method": method, "params": params}).encode()
        header = bytes([0x81]) + (bytes([0x80 | len(data)]) if len(data) < 126 else
                                  bytes([0x80 | 126]) + struct.pack(">H", len(data)) if len(data) < 1 << 16 else
                                  bytes([0x80 | 127]) + struct.pack(">Q", len(data)))
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))
        while True:
            message = self._message()
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"screenshots: {method} failed: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str, await_promise: bool = False):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=await_promise)
        return result.get("result", {}).get("value")


def start_browser(binary: str, width: int, profile: Path) -> tuple[subprocess.Popen, str]:
    """Start a headless Chromium with a DevTools port; return the process and its page's websocket URL."""
    proc = subprocess.Popen([binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                             "--no-first-run", "--disable-background-networking", "--remote-debugging-port=0",
                             f"--user-data-dir={profile}", f"--window-size={width},1000", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    port = None
    while time.time() < deadline and port is None:
        line = proc.stderr.readline()
        if "DevTools listening on ws://" in line:
            port = line.split("ws://", 1)[1].split("/", 1)[0].split(":")[1]
        elif not line and proc.poll() is not None:
            break
    if port is None:
        proc.kill()
        raise RuntimeError("screenshots: Chromium did not open its DevTools port")
    for _ in range(100):
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        pages = [t for t in targets if t.get("type") == "page"]
        if pages:
            return proc, pages[0]["webSocketDebuggerUrl"]
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("screenshots: Chromium opened no page")


def open_page(tab: DevTools, page: Path, width: int, wait_ms: int) -> dict:
    """Load ``page``, wait for MathJax, and measure it (:data:`MEASURE_JS`)."""
    tab.send("Emulation.setDeviceMetricsOverride", width=width, height=1000, deviceScaleFactor=1, mobile=False)
    tab.send("Page.navigate", url=page.resolve().as_uri())
    deadline = time.time() + wait_ms / 1000
    while time.time() < deadline and tab.evaluate("document.readyState") != "complete":
        time.sleep(0.1)
    tab.evaluate("(window.MathJax && MathJax.startup && MathJax.startup.promise) || Promise.resolve()",
                 await_promise=True)
    tab.evaluate("document.fonts ? document.fonts.ready.then(() => true) : true", await_promise=True)
    return readable_measure(tab.evaluate(MEASURE_JS))


def tile_clips(width: int, height: int, tile: int = TILE_PX) -> list[dict]:
    """The clips that capture a page ``width`` × ``height`` CSS pixels in tiles of at most ``tile`` rows,
    top to bottom: each at x = 0 and the page's full width, so the capture is where the page is."""
    return [{"x": 0, "y": top, "width": width, "height": min(tile, height - top), "scale": 1}
            for top in range(0, height, tile)]


def capture(tab: DevTools, png: Path, width: int, height: int) -> int:
    """The whole page as one PNG, captured in tiles of at most TILE_PX rows and stitched; returns its height.

    The window is first made as tall as the page (device metrics ``width`` × page height), so every tile
    lies inside the viewport and is captured as laid out there. (``captureBeyondViewport`` instead lets
    Chromium resize the view for each capture, which re-laid this theme's pages out and captured them
    shifted to the left.) The height is measured again at the new size until it settles; the window is
    put back to ``width`` × 1000 afterwards."""
    from PIL import Image

    png.parent.mkdir(parents=True, exist_ok=True)
    try:
        for _ in range(3):
            tab.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                     mobile=False)
            settled = int(tab.evaluate("Math.ceil(document.documentElement.scrollHeight)") or height)
            if settled == height:
                break
            height = settled
        tiles = []
        for clip in tile_clips(width, height):
            shot = tab.send("Page.captureScreenshot", format="png", captureBeyondViewport=False, clip=clip)
            with tempfile.NamedTemporaryFile(suffix=".png") as f:
                f.write(base64.b64decode(shot["data"]))
                f.flush()
                tiles.append((clip["y"], Image.open(f.name).convert("RGB")))
    finally:
        tab.send("Emulation.setDeviceMetricsOverride", width=width, height=1000, deviceScaleFactor=1, mobile=False)
    whole = Image.new("RGB", (width, height), "white")
    for top, tile in tiles:
        whole.paste(tile, (0, top))
    whole.save(png)
    return height


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pages", nargs="*", help="toc entries to take (default: every page of _toc.yml)")
    ap.add_argument("--width", type=int, default=1400, help="window width in CSS pixels (default 1400)")
    ap.add_argument("--wait-ms", type=int, default=30000, help="longest wait for a page to load (ms)")
    ap.add_argument("--html", type=Path, default=HTML_DIR, help="the built HTML (default _build/html)")
    ap.add_argument("--out", type=Path, default=HTML_DIR.parent / "screenshots", help="folder for the PNGs")
    args = ap.parse_args(argv)
    entries = args.pages or toc_files()
    pages = [(entry, args.html / f"{entry}.html") for entry in entries]
    missing = [str(p) for _, p in pages if not p.is_file()]
    if missing:
        raise SystemExit("screenshots: build the book first (make book); missing: " + ", ".join(missing))
    report = {}
    with tempfile.TemporaryDirectory() as profile:
        proc, url = start_browser(chromium(), args.width, Path(profile))
        try:
            tab = DevTools(url)
            tab.send("Page.enable")
            for entry, page in pages:
                measured = open_page(tab, page, args.width, args.wait_ms)
                png = args.out / f"{entry}.png"
                measured["height_px"] = capture(tab, png, args.width, measured["height_px"])
                report[entry] = measured
                over = measured["overflows"]
                print(f"{png} ({measured['height_px']} px tall)" +
                      (f": {len(over)} element(s) wider than the {measured['column_px']} px column" if over else ""))
                for item in over:
                    how = "scrolls" if item.get("scrolls") else "CUT"
                    print(f"    {item['kind']} {item['width_px']} px ({how}): {item['text'][:60]}")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "overflow.json").write_text(json.dumps({e: m["overflows"] for e, m in report.items()}, indent=1,
                                                       ensure_ascii=False))
    (args.out / "fonts.json").write_text(json.dumps({e: {"column_px": m["column_px"], **m["fonts"]}
                                                     for e, m in report.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
