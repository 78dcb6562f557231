"""report.html opened in a real headless Chromium: the grid and the charts render.

Chromium comes from Debian's `chromium` package. When it is missing the test installs it with
apt-get if it runs as root, and otherwise fails loudly (it never skips).
"""
from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
from report_util import _cell, write_seed_run

from ddprobe.report import write_reports
from ddprobe.report.style import outcome_colour
from ddprobe.results import Outcome
from ddprobe.runmodel import build_model
from ddprobe.store import load_run

_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str:
    for n in _NAMES:
        found = shutil.which(n)
        if found:
            return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=False,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], env=env, check=False,
                       stdout=subprocess.DEVNULL)
        for n in _NAMES:
            found = shutil.which(n)
            if found:
                return found
    pytest.fail("headless Chromium is needed to check report.html and could not be installed: "
                "run `apt-get install chromium` (this test never skips)")


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = find_chromium()
    argv = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run",
            "--disable-dev-shm-usage", f"--user-data-dir={tmp / 'chromium-profile'}", *args]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, HOME=str(tmp)))
    assert res.returncode == 0, res.stderr[-2000:]
    return res


class _Dom(HTMLParser):
    """The elements of the dumped DOM with their attributes (tag, attrs)."""

    def __init__(self) -> None:
        super().__init__()
        self.els: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.els.append((tag, {k: v or "" for k, v in attrs}))


def _png_pixels(data: bytes) -> tuple[int, int, Counter[tuple[int, int, int]]]:
    """Decode an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes): size and colours."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = ctype = 0
    while pos < len(data):
        n, typ = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + n]
        if typ == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            assert depth == 8 and ctype in (2, 6) and interlace == 0
        elif typ == b"IDAT":
            idat += chunk
        pos += 12 + n
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    colours: Counter[tuple[int, int, int]] = Counter()
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)
                           ) & 255
        for x in range(0, stride, bpp * 2):  # every other pixel: plenty to count colours
            colours[(line[x], line[x + 1], line[x + 2])] += 1
        prev = line
    return width, height, colours


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return (int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16))


@pytest.fixture(scope="module")
def html_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    extra = [_cell(16, True, Outcome.OK, accept=5.8, tok_s=280.0, passed=20,
                   patches=("ddtestbed-custom-mask",))]
    rec = load_run(write_seed_run(root, extra=extra))
    return write_reports(build_model(rec))["html"]


def test_html_is_self_contained(html_report: Path) -> None:
    text = html_report.read_text()
    assert not re.search(r"\ssrc=", text)  # nothing to fetch
    # links only within the page (verdict <-> cell anchors)
    assert all(h.startswith("#") for h in re.findall(r'\shref="([^"]*)"', text))
    assert "<script" not in text
    assert re.findall(r"https?://[^\s\"'<>]+", text) == ["http://www.w3.org/2000/svg"] * 2


def test_chromium_renders_the_grid_and_charts(html_report: Path, tmp_path: Path) -> None:
    dom_text = chromium(tmp_path, "--dump-dom", html_report.as_uri()).stdout
    dom = _Dom()
    dom.feed(dom_text)
    cells = [a for t, a in dom.els if t == "td" and "cell" in a.get("class", "").split()]
    got = {(a["data-budget"], a["data-graph"]): a["data-outcome"] for a in cells}
    assert got == {("8", "on"): "ok", ("16", "on"): "crash", ("32", "on"): "garbage",
                   ("64", "on"): "crash", ("8", "off"): "not-run", ("16", "off"): "ok",
                   ("32", "off"): "not-run", ("64", "off"): "not-run"}
    for a in cells:
        assert f"outcome-{a['data-outcome']}" in a["class"]
        assert f"background:{outcome_colour(a['data-outcome'])}" in a["style"]
    variants = [a for t, a in dom.els if t == "div" and "var" in a.get("class", "").split()]
    assert [a["class"] for a in variants] == ["var outcome-ok"]  # the patched re-run of b16
    charts = {a["id"] for t, a in dom.els if t == "svg" and "chart" in a.get("class", "")}
    assert charts == {"chart-accept", "chart-tok-s"}
    bars = [a for t, a in dom.els if t == "rect" and "bar" in a.get("class", "")]
    accept = {(a["data-series"], a["data-budget"]): float(a["data-value"]) for a in bars
              if float(a["data-value"]) < 10}
    assert accept == {("graph", "8"): 4.5, ("graph", "32"): 1.0, ("eager", "16"): 5.9}
    marks = [a for t, a in dom.els if t == "g" and "mark" in a.get("class", "")]
    assert len(marks) == 4  # crashes at 16 and 64, in both charts
    verdicts = [a["class"] for t, a in dom.els if t == "div" and "verdict" in a.get("class", "")]
    assert verdicts == ["verdict verdict-buffer_sizing", "verdict verdict-graph_capture",
                        "verdict verdict-buffer_sizing"]


def test_chromium_screenshot_shows_the_coloured_grid(html_report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1100,1400",
             "--hide-scrollbars", html_report.as_uri())
    width, height, colours = _png_pixels(shot.read_bytes())
    assert (width, height) == (1100, 1400)
    assert len(colours) > 50  # text, grid, charts: far from a blank page
    total = sum(colours.values())
    for outcome in ("ok", "crash", "garbage"):
        share = colours[_rgb(outcome_colour(outcome))] / total
        assert share > 0.005, f"{outcome} cells not visible ({share:.4f})"
    white = colours[(255, 255, 255)] / total
    assert 0.2 < white < 0.98
