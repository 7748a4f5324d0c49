"""The HTML timeline page: self-contained, its data agrees with the recording,
and it renders in headless Chromium to a picture that is not blank.

Chromium comes from Debian's ``chromium`` package, which
``scripts/install_deps.sh`` installs where it is missing and the network
allows; where it is absent the rendering test skips and says so.

Why a subprocess: the recording (test_timeline.py's fixture) comes from a fresh interpreter, as the
allocator it records is installed process-wide, and Chromium renders the page in a process of its
own; the page's checks run in process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest
from conftest import requires_ext

from test_timeline import run  # noqa: F401  (the module-scoped recording fixture)

pytestmark = requires_ext

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def page(run: dict[str, Any]) -> str:  # noqa: F811
    return (run["dir"] / "run.html").read_text()


def page_data(html: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="tp-data">(.*?)</script>', html, re.S)
    assert m, "no embedded data"
    return json.loads(m.group(1))


def test_page_has_no_external_url(run: dict[str, Any]) -> None:  # noqa: F811
    html = page(run)
    for pattern in (r"https?:", r"\bsrc\s*=", r"\bhref\s*=", r"url\(", r"@import", r"//cdn", r"<link\b", r"<iframe\b"):
        assert not re.search(pattern, html, re.I), pattern
    assert "<svg" in html and "<script>" in html


def test_plot_peak_equals_the_recorded_peak(run: dict[str, Any]) -> None:  # noqa: F811
    data = page_data(page(run))
    dev = data["devices"][0]
    series = dev["series"]
    recorded_peak = max(e[9] for e in json.loads((run["dir"] / "run.json").read_text())["tensorpager"]["events"])
    assert dev["peak_allocated"] == max(series["allocated"]) == recorded_peak
    assert recorded_peak == run["final"]["allocated_bytes.all.peak"]
    for i in range(len(series["t_ns"])):  # the stacked categories make up the allocated total
        assert sum(series[c][i] for c in data["categories"]) == series["allocated"][i]
    assert dev["peak_reserved"] == run["final"]["reserved_bytes.all.peak"]
    assert len(data["steps_ns"]) == 4


def test_page_lists_the_largest_blocks_at_the_peak(run: dict[str, Any]) -> None:  # noqa: F811
    html = page(run)
    top = page_data(html)["devices"][0]["top"]
    assert top and top == sorted(top, key=lambda b: -b["bytes"])
    assert "Largest blocks live at the peak" in html
    assert "Categories are inferred" in html


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def read_png(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB(A) rows of an 8-bit PNG, with the filters undone (stdlib only)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - channels] if x >= channels else 0
            b, c = prev[x], prev[x - channels] if x >= channels else 0
            if f == 1:
                line[x] = (line[x] + a) & 0xFF
            elif f == 2:
                line[x] = (line[x] + b) & 0xFF
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, rows


def test_page_renders_in_headless_chromium(run: dict[str, Any], tmp_path: Path) -> None:  # noqa: F811
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium; scripts/install_deps.sh "
                    "installs it where the network allows)")
    png = tmp_path / "page.png"
    args = [chromium, "--headless", "--disable-gpu", "--hide-scrollbars", f"--screenshot={png}",
            "--window-size=1280,900", (run["dir"] / "run.html").as_uri()]
    if os.geteuid() == 0:
        args.insert(1, "--no-sandbox")
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(tmp_path)})
    assert png.exists(), f"no screenshot; chromium said:\n{proc.stderr[-2000:]}"
    width, height, rows = read_png(png)
    assert (width, height) == (1280, 900)
    channels = len(rows[0]) // width
    pixels = [tuple(r[x:x + 3]) for r in rows[::4] for x in range(0, len(r), channels * 4)]
    non_white = sum(1 for p in pixels if min(p) < 235)
    assert non_white > len(pixels) // 50, "the page rendered (nearly) blank"
    colours = set(pixels)
    assert len(colours) > 20, "too few colours for a plot"
    green = (0x59, 0xA1, 0x4F)  # activation's band
    assert any(all(abs(p[i] - green[i]) < 12 for i in range(3)) for p in pixels), "no activation band drawn"
