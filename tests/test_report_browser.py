"""The rendered site in a real browser: headless Chromium (ampsuite.browser), from file://.

Checks per page: no console error, no uncaught exception, no failed load, no
request that leaves file://, the stylesheet applied, every chart drawn with
marks; and a screenshot of the overview that is not blank. Skipped only when
Chromium is missing and $CI is unset; under CI a missing Chromium fails.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from records import sealed

from ampsuite import ReportSection, analysis
from ampsuite.browser import find_chromium, load_page
from ampsuite.report import render_site

pytestmark = pytest.mark.slow  # a headless Chromium per page

FIXTURES = Path(__file__).parent / "fixtures"

if find_chromium() is None and not os.environ.get("CI"):
    pytest.skip(
        "chromium is not installed (apt-get install chromium); required when CI is set", allow_module_level=True
    )

CHART_MARKS = """
Array.from(document.querySelectorAll('svg.chart')).map(svg => ({
  marks: svg.querySelectorAll('rect, path, circle').length,
  titled: Array.from(svg.querySelectorAll('rect, path, circle')).filter(m => m.querySelector('title')).length,
  width: svg.getBoundingClientRect().width,
}))
"""

PAGE_FACTS = {
    "css": "getComputedStyle(document.documentElement).getPropertyValue('--ampsuite-css').trim()",
    "home_link": "document.querySelector('a[href=\"index.html\"]') !== null",
    "scripts": "document.querySelectorAll('script').length",
    "charts": CHART_MARKS,
    "text": "document.body.innerText",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if find_chromium() is None:
        pytest.fail("CI is set but chromium is missing: install Debian's chromium package")
    a = json.loads((FIXTURES / "results_a.json").read_text())
    b = json.loads((FIXTURES / "results_b.json").read_text())
    out = tmp_path_factory.mktemp("site")
    section = ReportSection("Plugin section", "<p>static plugin markup</p>", anchor="plugin")
    render_site([b], out, compare_with=a, history=analysis.history([a, b]), extra_sections=[section])
    return out


def test_every_page_loads_cleanly_with_styles_and_drawn_charts(site: Path) -> None:
    pages = sorted(site.glob("*.html"))
    assert len(pages) >= 5
    charts_seen = 0
    for page in pages:
        report = load_page(page.as_uri(), expressions=PAGE_FACTS, settle=0.3)
        assert report.errors() == [], f"{page.name}: {report.errors()}"
        assert report.offsite("file://") == [], f"{page.name}: requests left file://: {report.offsite('file://')}"
        facts = report.values
        assert facts["css"] == "1", f"{page.name}: stylesheet not applied"
        assert facts["home_link"], page.name
        assert facts["scripts"] == 0, page.name
        for chart in facts["charts"]:
            charts_seen += 1
            assert chart["marks"] > 0 and chart["titled"] == chart["marks"], f"{page.name}: {chart}"
            assert chart["width"] > 100, f"{page.name}: chart not laid out: {chart}"
    assert charts_seen >= 12


def test_escaped_script_is_text_in_the_dom(site: Path) -> None:
    report = load_page((site / "index.html").as_uri(), expressions=PAGE_FACTS, settle=0.2)
    assert "<script>alert(1)</script>" in report.values["text"]
    assert report.values["scripts"] == 0


def test_overview_screenshot_is_not_blank(site: Path, tmp_path: Path) -> None:
    from PIL import Image

    load_page((site / "index.html").as_uri(), screenshots=tmp_path, settle=0.2)
    image = Image.open(tmp_path / "page.png").convert("RGB")
    assert image.size[0] >= 640 and image.size[1] >= 400, image.size
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50, "screenshot is (nearly) a single colour"
    share = max(colours)[0] / (image.size[0] * image.size[1])
    assert share < 0.95, f"one colour covers {share:.0%} of the screenshot"


OVERFLOW = """(() => {
  const width = document.documentElement.clientWidth;
  const bad = [];
  if (document.documentElement.scrollWidth > width) bad.push('page: ' + document.documentElement.scrollWidth + 'px');
  document.querySelectorAll('table, svg, pre, .table-wrap').forEach(el => {
    const name = el.tagName + '.' + (typeof el.className === 'string' ? el.className : el.className.baseVal);
    if (el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== 'visible')
      bad.push(name + ' scrolls: ' + el.scrollWidth + ' > ' + el.clientWidth);
    if (el.getBoundingClientRect().right > width + 1) bad.push(name + ' ends past the window');
  });
  return bad;
})()"""


def test_no_page_overflows_horizontally_at_1280_px(site: Path) -> None:
    """Nothing wider than a 1280 px window: no page scrollbar, and no table whose columns hide behind one."""
    for page in sorted(site.glob("*.html")):
        report = load_page(page.as_uri(), expressions={"overflow": OVERFLOW}, settle=0.1, width=1280)
        assert report.values["overflow"] == [], f"{page.name}: {report.values['overflow']}"


@pytest.fixture(scope="module")
def machines_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three machines: the committed H200 run, a copy as if from another GPU and host, and the fixture's run
    (another H200 host, whose cells are on that machine only)."""
    import copy

    h200 = json.loads((Path(__file__).parent.parent / "reports/h200/cudnn-benchmark.json").read_text())
    other = copy.deepcopy(h200)
    other["environment"].update(hostname="a-rather-long-host-name.cluster.example.org")
    other["environment"]["gpu"]["name"] = "NVIDIA H100 80GB HBM3"
    other["cells"][2].update(status="failed", evidence={"type": "RuntimeError", "message": "x" * 300}, metrics={})
    sealed(other)
    out = tmp_path_factory.mktemp("machines")
    a = json.loads((FIXTURES / "results_a.json").read_text())
    render_site([h200, other, a], out)
    return out


def test_machines_page_loads_cleanly_and_fits_1280_px(machines_site: Path) -> None:
    for name in ("machines.html", "index.html"):
        page = machines_site / name
        report = load_page(page.as_uri(), expressions={**PAGE_FACTS, "overflow": OVERFLOW}, settle=0.2, width=1280)
        assert report.errors() == [], f"{name}: {report.errors()}"
        assert report.values["css"] == "1" and report.values["scripts"] == 0, name
        assert report.values["overflow"] == [], f"{name}: {report.values['overflow']}"
        assert "Machines" in report.values["text"], name
    charts = load_page((machines_site / "machines.html").as_uri(), expressions=PAGE_FACTS, settle=0.2).values["charts"]
    assert charts and all(c["marks"] > 0 and c["titled"] == c["marks"] and c["width"] > 100 for c in charts), charts


def test_every_page_links_to_the_results_json(site: Path) -> None:
    for page in sorted(site.glob("*.html")):
        links = load_page(
            page.as_uri(),
            expressions={"json": "Array.from(document.querySelectorAll('a[href$=\".json\"]')).map(a => a.href)"},
            settle=0.1,
        ).values["json"]
        assert links, f"{page.name}: no link to the results JSON"
        for link in links:
            doc = json.loads(Path(link.removeprefix("file://")).read_text(encoding="utf-8"))
            assert doc["format"] == "ampsuite-results"
