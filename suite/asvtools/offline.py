"""Make a site written by ``asv publish`` work without a network, and from file://.

asv's ``index.html`` loads jQuery, flot, bootstrap and three small plugins
from CDNs; offline it falls back to an error page. ampsuite ships pinned
copies of exactly those files (taken from the npm registry, see
``vendor/README.md``) and :func:`make_offline` copies them into the site and
points the page at them. An asv whose page asks for a file that is not in
:data:`ASSETS` is an error that names the URL, never a half-offline site.

Opened from file://, the page still could not read its data: it fetches its
JSON files with ``$.ajax``, and browsers refuse such requests from file://
("Error fetching content"). :func:`write_json_scripts` writes each JSON file
of the site beside itself as ``FILE.json.js``, a script that hands the data
over, and ``www/ampsuite-file-protocol.js`` (loaded right after jQuery)
answers asv's JSON requests from those scripts when, and only when, the page
is a file:// one; a script element may load a file:// script.

This module does not import asv: the asv publisher plugin
(:mod:`ampsuite.asvtools.publisher`) and any post-processing of an existing site
share it.
"""

from __future__ import annotations

import functools
import hashlib
import re
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

__all__ = [
    "ASSETS",
    "FILE_PROTOCOL_SCRIPT",
    "VENDOR_DIR",
    "Asset",
    "make_offline",
    "remote_references",
    "vendored_file",
    "write_json_scripts",
]

VENDOR_DIR = "vendor"
"""Folder of the published site that receives the vendored files."""

LICENSES = "LICENSES.txt"
FILE_PROTOCOL_SCRIPT = "ampsuite-file-protocol.js"
"""ampsuite's own script (``www/``), copied beside the vendored files: asv's JSON requests answered on file://."""
JSON_SCRIPT_SUFFIX = ".js"
JSON_SCRIPT = "ampsuiteAsvJson(document.currentScript, {json});\n"
# The <script> that loads jQuery, once make_offline pointed it at the vendored copy.
_JQUERY_TAG = re.compile(r"""<script\b[^>]*\bsrc=(["'])vendor/jquery-[^"']*\1[^>]*>\s*</script>""", re.IGNORECASE)


@dataclass(frozen=True)
class Asset:
    """One file asv's page loads from a CDN, and the pinned copy that replaces it.

    Attributes:
        url: the exact URL in asv 0.6's ``www/index.html``.
        file: the vendored file's name (in ``suite/asvtools/vendor``).
        package: the npm package and version the file was taken from.
        path: the file's path inside that package.
        sha256: hex digest of the vendored file, checked when it is copied.
    """

    url: str
    file: str
    package: str
    path: str
    sha256: str


ASSETS: tuple[Asset, ...] = (
    Asset(
        "https://code.jquery.com/jquery-3.3.1.min.js",
        "jquery-3.3.1.min.js",
        "jquery@3.3.1",
        "dist/jquery.min.js",
        "160a426ff2894252cd7cebbdd6d6b7da8fcd319c65b70468f10b6690c45d02ef",
    ),
    Asset(
        "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.min.js",
        "jquery.flot-0.8.3.js",
        "flot@0.8.3",
        "jquery.flot.js",
        "b7b931f273c38b1277b9c6c1f4e05c4ec09885a487bddaf3279e2d7e49a38e12",
    ),
    Asset(
        "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.time.min.js",
        "jquery.flot.time-0.8.3.js",
        "flot@0.8.3",
        "jquery.flot.time.js",
        "a582c832adc7138a6b05aaf61f16ebac274701f1be4afea77e739a1c34b9c41a",
    ),
    Asset(
        "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.selection.min.js",
        "jquery.flot.selection-0.8.3.js",
        "flot@0.8.3",
        "jquery.flot.selection.js",
        "e6c85f6c1ebe4b4da29d8ae238c7c5060283f05f7ef054f6b91817d02c092918",
    ),
    Asset(
        "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.categories.min.js",
        "jquery.flot.categories-0.8.3.js",
        "flot@0.8.3",
        "jquery.flot.categories.js",
        "6e81664b28ea795c734906f4aa15614640a75ac7fbd399a7fb9084040698351a",
    ),
    Asset(
        "https://cdn.jsdelivr.net/npm/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js",
        "jquery.flot.orderBars-1.0.0.js",
        "flot-orderbars@1.0.0",
        "js/jquery.flot.orderBars.js",
        "39735b4f46f96ff4e082572401f47c55a2767b366fd1d1e821e44a8d830a12bf",
    ),
    Asset(
        "https://cdnjs.cloudflare.com/ajax/libs/stupidtable/1.0.1/stupidtable.min.js",
        "stupidtable-1.1.3.min.js",
        "stupid-table-plugin@1.1.3",
        "stupidtable.min.js",
        "4642380f28ebe9ed7cac251793b281ef8620c4386205d92788f9b12f5cceb4e0",
    ),
    Asset(
        "https://cdnjs.cloudflare.com/ajax/libs/blueimp-md5/2.19.0/js/md5.min.js",
        "md5-2.19.0.min.js",
        "blueimp-md5@2.19.0",
        "js/md5.min.js",
        "64d7ded388c562e4bde9e58ce205e5fa01b9734fcd434d496eb7b4fbfe9b927d",
    ),
    Asset(
        "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/js/bootstrap.min.js",
        "bootstrap-3.1.1.min.js",
        "bootstrap@3.1.1",
        "dist/js/bootstrap.min.js",
        "898d05a17f2cfc5120ddcdba47a885c378c0b466f30f0700e502757e24b403a1",
    ),
    Asset(
        "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css",
        "bootstrap-3.1.1.min.css",
        "bootstrap@3.1.1",
        "dist/css/bootstrap.min.css",
        "e9503448692b738dd260fbd7f7cabf2e11f09b600fa97e6eb3a56eba5b1a7e9b",
    ),
)

# A <script ... src=...> or <link ... href=...> tag: the elements that load assets.
_TAG = re.compile(r"<(script|link)\b[^>]*>", re.IGNORECASE)
_URL_ATTR = re.compile(r"""\b(src|href)\s*=\s*(["'])(.*?)\2""", re.IGNORECASE)
# Attributes that only make sense for a cross-origin CDN copy.
_CDN_ATTRS = re.compile(r"""\s+(integrity|crossorigin|referrerpolicy)\s*=\s*(["']).*?\2""", re.IGNORECASE)
_CSS_URL = re.compile(r"""url\(\s*(["']?)(.*?)\1\s*\)""", re.IGNORECASE)
_REMOTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)


class OfflineError(RuntimeError):
    """The site cannot be made to work offline (an unknown CDN asset, a damaged vendored file)."""


def vendored_file(asset: Asset) -> Path:
    """The packaged copy of ``asset``, after checking its digest."""
    path = Path(str(resources.files("ampsuite.asvtools") / VENDOR_DIR / asset.file))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != asset.sha256:
        raise OfflineError(f"vendored {asset.file} has sha256 {digest}, expected {asset.sha256} ({asset.package})")
    return path


def _is_remote(url: str) -> bool:
    return bool(_REMOTE.match(url.strip()))


def _rewrite_tag(found: re.Match[str], by_url: dict[str, Asset], page: Path) -> str:
    tag = found.group(0)
    match = _URL_ATTR.search(tag)
    if match is None or not _is_remote(match.group(3)):
        return tag
    url = match.group(3)
    if tag.lower().startswith("<link") and not re.search(r"""rel\s*=\s*["']?stylesheet""", tag, re.IGNORECASE):
        return tag  # e.g. rel="alternate": a link, not a resource the page loads
    asset = by_url.get(url)
    if asset is None:
        known = ", ".join(sorted(by_url))
        raise OfflineError(
            f"{page.name} loads {url}, which ampsuite does not vendor (known: {known}); "
            "this asv is newer than suite/asvtools knows: add the file to suite/asvtools/vendor and ASSETS"
        )
    local = f"{VENDOR_DIR}/{asset.file}"
    tag = tag[: match.start(3)] + local + tag[match.end(3) :]
    return _CDN_ATTRS.sub("", tag)


def make_offline(html_dir: str | Path) -> list[Path]:
    """Copy the vendored files into ``html_dir`` and point every HTML page at them.

    Idempotent. Returns the pages that were changed.

    :raises OfflineError: a page loads a remote asset that is not in :data:`ASSETS`,
        or a vendored file does not match its recorded digest.
    """
    root = Path(html_dir)
    if not (root / "index.html").is_file():
        raise OfflineError(f"{root} has no index.html: is it the html_dir of `asv publish`?")
    by_url = {a.url: a for a in ASSETS}
    target = root / VENDOR_DIR
    target.mkdir(exist_ok=True)
    for asset in ASSETS:
        shutil.copyfile(vendored_file(asset), target / asset.file)
    shutil.copyfile(Path(str(resources.files("ampsuite.asvtools") / VENDOR_DIR / LICENSES)), target / LICENSES)
    shutil.copyfile(
        Path(str(resources.files("ampsuite.asvtools") / "www" / FILE_PROTOCOL_SCRIPT)), target / FILE_PROTOCOL_SCRIPT
    )
    changed = []
    for page in sorted(root.glob("*.html")):
        text = page.read_text(encoding="utf-8")
        new = _with_file_protocol(_TAG.sub(functools.partial(_rewrite_tag, by_url=by_url, page=page), text))
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(page)
    write_json_scripts(root)
    return changed


def _with_file_protocol(page: str) -> str:
    """The page with ampsuite's file:// transport loaded right after jQuery (before asv's scripts ask for data)."""
    tag = f'<script src="{VENDOR_DIR}/{FILE_PROTOCOL_SCRIPT}"></script>'
    if tag in page:
        return page
    return _JQUERY_TAG.sub(lambda m: f"{m.group(0)}\n    {tag}", page, count=1)


def write_json_scripts(html_dir: str | Path) -> int:
    """Write every JSON file under ``html_dir`` beside itself as ``FILE.json.js`` (see the module's doc).

    Idempotent; returns how many scripts were written or rewritten. The JSON text is used as it is: a JSON
    document is a JavaScript expression.
    """
    written = 0
    for path in sorted(Path(html_dir).rglob("*.json")):
        script = path.with_name(path.name + JSON_SCRIPT_SUFFIX)
        text = JSON_SCRIPT.format(json=path.read_text(encoding="utf-8").strip())
        if not script.is_file() or script.read_text(encoding="utf-8") != text:
            script.write_text(text, encoding="utf-8")
            written += 1
    return written


def remote_references(html_dir: str | Path) -> list[str]:
    """Every remote URL the site would load as a resource: script and stylesheet
    tags, images, and ``url(...)`` in CSS. Plain ``<a href>`` links are not loads.

    Returned as ``"FILE: URL"`` strings; an offline site returns ``[]``.
    """
    root = Path(html_dir)
    found: list[str] = []
    for page in sorted(root.rglob("*.html")):
        text = page.read_text(encoding="utf-8", errors="replace")
        for tag in re.finditer(r"<(script|link|img|iframe|source|embed)\b[^>]*>", text, re.IGNORECASE):
            attr = re.search(r"""\b(src|href)\s*=\s*(["'])(.*?)\2""", tag.group(0), re.IGNORECASE)
            if attr is None or not _is_remote(attr.group(3)):
                continue
            if tag.group(1).lower() == "link" and re.search(r"""rel\s*=\s*["']?alternate""", tag.group(0), re.I):
                continue
            found.append(f"{page.relative_to(root)}: {attr.group(3)}")
    for sheet in sorted(root.rglob("*.css")):
        text = sheet.read_text(encoding="utf-8", errors="replace")
        found.extend(
            f"{sheet.relative_to(root)}: {m.group(2)}" for m in _CSS_URL.finditer(text) if _is_remote(m.group(2))
        )
    return found
