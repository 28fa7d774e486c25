"""The static HTML report, the Markdown summary and the CSV export of ampsuite results.

``render_site(docs, out_dir)`` writes a self-contained site (no network, no
scripts) from loaded results documents; ``markdown_summary`` and
``write_csv`` give the same figures for pull-request comments and
spreadsheets. The figures themselves come from :mod:`ampsuite.analysis`.
"""

from __future__ import annotations

from ampsuite.report.csv_export import write_csv
from ampsuite.report.markdown import markdown_summary
from ampsuite.report.render import render_site

__all__ = ["markdown_summary", "render_site", "write_csv"]
