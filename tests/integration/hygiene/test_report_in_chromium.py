"""The weekly HTML report drawn by a real browser (Debian's `chromium`, headless): the "act on
this" list is laid out above the first chart and within the first screen. No lab, no root;
skips only where chromium is missing (and that fails CI: FLEET_TEST_NO_SKIP, tests/conftest.py;
scripts/test installs it).

The page's own layout is read back from the browser: a probe script appended to a copy of the
report writes the boxes of `#act` and of every chart (`svg`) into the DOM, which `--dump-dom`
prints once the page has loaded."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fleet.reports.html import render_html
from tests.unit.hygiene.test_serving_section import weekly_report

WIDTH, HEIGHT = 1280, 900
PROBE = """<script>
const box = e => { const r = e.getBoundingClientRect(); return [r.top, r.bottom, r.width]; };
const act = document.querySelector('#act');
document.body.setAttribute('data-geometry', JSON.stringify({
  act: act ? box(act) : null, actions: act ? act.querySelectorAll('li').length : 0,
  charts: [...document.querySelectorAll('svg')].map(box), viewport: innerHeight}));
</script>"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        if path := shutil.which(name):
            return path
    pytest.skip("no chromium (apt-get install --no-install-recommends chromium; scripts/test "
                "does)")


def _browse(binary: str, page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}",
         "--virtual-time-budget=2000", *args, page.as_uri()],
        capture_output=True, text=True, timeout=90, check=False)


def _report() -> dict[str, Any]:
    """The unit tests' weekly report, its ECC trend moved so a trend chart is drawn too."""
    report = weekly_report()
    report["trends"]["pools"]["h100"]["ecc_corrected"] = [0, 4, 12, 40]
    return report


def test_the_action_list_is_above_the_charts_in_a_real_browser(tmp_path: Path) -> None:
    binary = _chromium()
    html = render_html(_report())
    assert html.count("<svg") >= 2  # the moved ECC trend and the moved p99 are drawn
    page = tmp_path / "report.html"
    page.write_text(html.replace("</body>", PROBE + "</body>"))
    done = _browse(binary, page, tmp_path / "profile", "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'data-geometry="([^"]*)"', done.stdout)
    assert found, done.stdout[-2000:]
    geo = json.loads(found.group(1).replace("&quot;", '"'))
    act_top, act_bottom, act_width = geo["act"]
    assert geo["actions"] >= 2, geo  # the drifted host and the serving regression
    assert act_width > 0 and act_bottom > act_top, geo
    assert len(geo["charts"]) >= 2 and all(c[2] > 0 for c in geo["charts"]), geo
    first_chart = min(c[0] for c in geo["charts"])
    assert act_bottom <= first_chart, geo  # the whole list before any chart
    assert act_bottom <= geo["viewport"], geo  # on the first screen, no scrolling
    # and a screenshot of that first screen is drawn (a PNG of the window's size)
    shot = tmp_path / "first-screen.png"
    done = _browse(binary, page, tmp_path / "profile", f"--screenshot={shot}")
    assert done.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", done.stderr
    width, height = (int.from_bytes(shot.read_bytes()[16 + i:20 + i], "big") for i in (0, 4))
    assert (width, height) == (WIDTH, HEIGHT)
