"""Host-supplied strings in the Markdown and HTML reports are text, never markup (issue 32,
"suspected"): Markdown renderers (tickets, wikis, chat) pass raw HTML through, so a host, pool,
release or message holding `<img onerror=...>` must arrive escaped."""

from __future__ import annotations

import copy
from typing import Any

from fleet.reports import render_html, render_markdown
from tests.unit.hygiene.test_reports import report  # noqa: F401  (the fixture)

HOSTILE = '<img src=x onerror=alert(1)>&amp;\n| evil |'
_KEYS = {"host", "pool", "text", "message", "reason", "reasons", "release", "alerts", "hosts",
         "breakers_tripped", "benchmark_regressions", "decision"}


def poisoned(value: Any, key: str = "") -> Any:
    """The report with every host-supplied string replaced by HOSTILE."""
    if isinstance(value, dict):
        return {k: poisoned(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [poisoned(v, key) for v in value]
    if isinstance(value, str) and key in _KEYS:
        return HOSTILE
    return value


def test_the_markdown_report_escapes_html(report: dict[str, Any]) -> None:  # noqa: F811
    bad = poisoned(copy.deepcopy(report))
    bad["quarantine"]["alerts"] = [HOSTILE]
    bad["summary"]["breakers_tripped"] = [HOSTILE]
    md = render_markdown(bad)
    assert HOSTILE.count("<") and "<img" not in md
    assert "&lt;img src=x onerror=alert(1)&gt;&amp;amp;" in md
    # a newline in a host string starts no line of its own, a pipe splits no table cell
    assert not any(line.startswith("| evil |") for line in md.splitlines())
    assert "\\| evil \\|" in md


def test_the_html_report_escapes_html(report: dict[str, Any]) -> None:  # noqa: F811
    bad = poisoned(copy.deepcopy(report))
    bad["quarantine"]["alerts"] = [HOSTILE]
    page = render_html(bad)
    assert "<img" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


def test_plain_names_are_unchanged(report: dict[str, Any]) -> None:  # noqa: F811
    md = render_markdown(report)
    assert "&lt;" not in md and "&amp;" not in md
