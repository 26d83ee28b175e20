"""Reports of the weekly hygiene job: Markdown, self-contained HTML, JSON, Prometheus textfile.

Every renderer takes the report's JSON form (`HygieneReport.as_dict()`), so a report can be
re-rendered from a saved JSON file, and golden-file tests need no database.
"""

from fleet.reports.files import write_atomic, write_reports
from fleet.reports.html import render_html
from fleet.reports.markdown import render_json, render_markdown
from fleet.reports.prometheus import render_prometheus

__all__ = [
    "render_html",
    "render_json",
    "render_markdown",
    "render_prometheus",
    "write_atomic",
    "write_reports",
]
