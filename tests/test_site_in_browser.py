"""Open every page of the built site in headless Chromium, served from localhost, and check what a reader gets.

For each page: no request leaves localhost, nothing fails to load, the console shows no error, the math is
typeset by MathJax, every image has loaded and has alt text, and the headings are in order. Each chapter page
(built from book/NN_*.ipynb) has a Colab button for its own notebook, and the search finds the MHA chapter.

Screenshots and a per-page report (requests, bytes) go to _build/screenshots/. The server compresses text
with gzip, as static hosts such as GitHub Pages do, so "transferred" is what a first visit downloads.

Chromium: Debian's `chromium` package at /usr/bin/chromium (or the path in $CHROMIUM); `make test` installs it
with apt when it is missing. Playwright drives it and downloads no browser of its own.
"""
import functools
import gzip
import http.server
import json
import os
import pathlib
import re
import threading
import time
import urllib.parse

import pytest

from conftest import ROOT, SUMMARY_LINES, chapter_paths
from book import colab_url

CHROMIUM = pathlib.Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
SCREENSHOTS = ROOT / "_build" / "screenshots"
MHA_CHAPTER = "03_multi_head"  # what a search for "multi-head" must find
MAX_PAGE_BYTES = 2 * 10**6  # a page with its images, and everything a first visit transfers
MAX_IMAGE_PIXELS = 2000  # figures are drawn at 100 DPI; the text column is about 800 pixels wide
COMPRESSIBLE = {".html", ".js", ".css", ".svg", ".json", ".txt", ".map", ".inv"}
LOCAL_HOSTS = {"127.0.0.1", "localhost"}

pytestmark = pytest.mark.skipif(
    not CHROMIUM.is_file(),
    reason=f"Chromium is not installed at {CHROMIUM}, so the site was NOT checked in a browser. `make test` installs "
           "it with `apt-get install chromium` when it can; install it (or set $CHROMIUM) and run the tests again.")


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the site; gzip-compresses text files for clients that accept it, as real static hosts do."""
    _gzipped: dict = {}

    def do_GET(self):
        path = pathlib.Path(self.translate_path(self.path))
        if (path.suffix in COMPRESSIBLE and path.is_file()
                and "gzip" in self.headers.get("Accept-Encoding", "")):
            body = self._gzipped.get(path)
            if body is None:
                body = self._gzipped[path] = gzip.compress(path.read_bytes(), compresslevel=6)
            self.send_response(200)
            self.send_header("Content-Type", self.guess_type(str(path)))
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site(built_book):
    """The built site, served on a free localhost port: yields (html folder, base URL)."""
    assert built_book.returncode == 0, built_book.log[-3000:]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_Handler, directory=str(built_book.html)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield built_book.html, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                              args=["--no-sandbox", "--disable-gpu"])
        yield chromium
        chromium.close()


def site_pages(html: pathlib.Path):
    """Every HTML page of the site, relative to its root (the redirect index.html excepted)."""
    pages = []
    for path in sorted(html.rglob("*.html")):
        rel = path.relative_to(html)
        if rel.parts[0].startswith("_"):
            continue  # _static, _sources, _images: assets, not pages
        if 'http-equiv="Refresh"' in path.read_text(errors="replace")[:2000]:
            continue
        pages.append(rel.as_posix())
    return pages


# Checks run inside the page once it has loaded and MathJax has finished.
_PAGE_FACTS = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  await document.fonts.ready;
  const article = document.querySelector('article') || document.body;
  const prose = article.cloneNode(true);
  prose.querySelectorAll('pre, code, script, style, mjx-container, .highlight').forEach(e => e.remove());
  const images = [...document.images].map(img => ({
    src: img.currentSrc || img.src, alt: img.getAttribute('alt'), loaded: img.complete && img.naturalWidth > 0,
    width: img.naturalWidth, height: img.naturalHeight}));
  const headings = [...article.querySelectorAll('h1, h2, h3, h4, h5, h6')].map(h => ({
    level: Number(h.tagName[1]), text: h.textContent.replace(/[#¶]/g, '').trim()}));
  return {
    mathSources: document.querySelectorAll('.math, span.math, div.math').length,
    mathTypeset: document.querySelectorAll('mjx-container').length,
    mathErrors: document.querySelectorAll('mjx-merror, [data-mjx-error]').length,
    prose: prose.innerText,
    images: images,
    headings: headings,
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
  };
}"""


def open_page(browser, url):
    """Load ``url`` in a fresh context (cold cache); return the page and what it requested and logged."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, service_workers="block")
    page = context.new_page()
    seen = {"requests": [], "failed": [], "console_errors": [], "page_errors": []}
    page.on("request", lambda r: seen["requests"].append(r))
    page.on("requestfailed", lambda r: seen["failed"].append(f"{r.url} ({r.failure})"))
    page.on("response", lambda r: r.status >= 400 and seen["failed"].append(f"{r.url} (HTTP {r.status})"))
    page.on("console", lambda m: m.type == "error" and seen["console_errors"].append(m.text))
    page.on("pageerror", lambda e: seen["page_errors"].append(str(e)))
    page.goto(url, wait_until="networkidle")
    return context, page, seen


def weigh(requests):
    """(bytes transferred, bytes after decompression) over the page's requests."""
    transferred = decoded = 0
    for request in requests:
        response = request.response()
        if response is None or not request.url.startswith("http"):
            continue
        transferred += max(request.sizes()["responseBodySize"], 0)
        try:
            decoded += len(response.body())
        except Exception:  # a redirect or an aborted request has no body
            pass
    return transferred, decoded


def third_party(requests):
    hosts = []
    for request in requests:
        parsed = urllib.parse.urlsplit(request.url)
        if parsed.scheme in ("http", "https", "ws", "wss") and parsed.hostname not in LOCAL_HOSTS:
            hosts.append(request.url)
    return hosts


def heading_problems(headings):
    problems = []
    if [h["level"] for h in headings].count(1) != 1:
        problems.append(f"{[h['level'] for h in headings].count(1)} level-1 headings (want exactly 1)")
    for before, after in zip(headings[:-1], headings[1:], strict=True):
        if after["level"] > before["level"] + 1:
            problems.append(f"h{before['level']} {before['text']!r} is followed by h{after['level']} {after['text']!r}")
    return problems


def test_every_page_in_the_browser(site, browser):
    html, base = site
    pages = site_pages(html)
    chapters = {f"book/{path.stem}.html": path for path in chapter_paths()}
    missing = sorted(set(chapters) - set(pages))
    assert not missing, f"chapters with no page in the site: {missing}"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for old in [*SCREENSHOTS.glob("*.jpg"), *SCREENSHOTS.glob("*.png")]:
        old.unlink()

    start = time.perf_counter()
    failures, rows = [], []
    for rel in pages:
        context, page, seen = open_page(browser, base + rel)
        facts = page.evaluate(_PAGE_FACTS)
        page.wait_for_load_state("networkidle")  # fonts MathJax asked for while typesetting
        problems = []
        if outside := third_party(seen["requests"]):
            problems.append(f"requests to third parties: {outside}")
        if seen["failed"]:
            problems.append(f"failed requests: {seen['failed']}")
        if seen["console_errors"] or seen["page_errors"]:
            problems.append(f"console errors: {seen['console_errors'] + seen['page_errors']}")
        if facts["mathSources"] and facts["mathTypeset"] < facts["mathSources"]:
            problems.append(f"math not typeset: {facts['mathTypeset']} MathJax outputs for "
                            f"{facts['mathSources']} math elements")
        if facts["mathErrors"]:
            problems.append(f"{facts['mathErrors']} TeX errors in the typeset math")
        for raw in ("$$", "\\(", "\\["):
            if raw in facts["prose"]:
                at = facts["prose"].index(raw)
                problems.append(f"raw {raw} left in the text: ...{facts['prose'][max(0, at - 60):at + 60]!r}...")
        for image in facts["images"]:
            name = image["src"].rsplit("/", 1)[-1]
            if not image["loaded"]:
                problems.append(f"image did not load: {name}")
            elif image["width"] > MAX_IMAGE_PIXELS or image["height"] > MAX_IMAGE_PIXELS:
                problems.append(f"image {name} is {image['width']} x {image['height']} pixels: draw it smaller or at a "
                                f"lower DPI (at most {MAX_IMAGE_PIXELS} pixels a side)")
            alt = (image["alt"] or "").strip()
            if not alt or re.search(r"\.(png|jpe?g|gif|svg|webp)$", alt, re.I):
                problems.append(f"image without alt text: {name} (alt={image['alt']!r})")
        problems += heading_problems(facts["headings"])
        if rel in chapters:
            want = colab_url(chapters[rel].relative_to(ROOT).as_posix())
            if want not in facts["links"]:
                problems.append(f"no Colab button pointing at {want}")

        transferred, decoded = weigh(seen["requests"])
        own = [r for r in seen["requests"] if r.url.split("?")[0].split("#")[0] == (base + rel)
               or r.resource_type == "image" and "/_images/" in r.url]
        _, page_and_images = weigh(own)
        if page_and_images > MAX_PAGE_BYTES:
            problems.append(f"the page with its images weighs {page_and_images:,} bytes (limit {MAX_PAGE_BYTES:,})")
        if transferred > MAX_PAGE_BYTES:
            problems.append(f"a first visit transfers {transferred:,} bytes (limit {MAX_PAGE_BYTES:,})")

        shot = SCREENSHOTS / (rel.replace("/", "__").removesuffix(".html") + ".jpg")
        page.screenshot(path=str(shot), full_page=True, type="jpeg", quality=70)
        context.close()
        rows.append({"page": rel, "requests": len(seen["requests"]), "third_party": len(third_party(seen["requests"])),
                     "transferred": transferred, "decoded": decoded, "page_and_images": page_and_images,
                     "images": len(facts["images"]), "math": facts["mathTypeset"],
                     "screenshot": shot.relative_to(ROOT).as_posix()})
        failures += [f"{rel}: {p}" for p in problems]

    # Search: the results list the MHA chapter for "multi-head".
    context, page, seen = open_page(browser, base + "search.html?q=multi-head")
    page.wait_for_selector("#search-results ul.search li a", timeout=15_000)
    results = page.eval_on_selector_all("#search-results ul.search li a", "links => links.map(a => a.href)")
    if not any(f"{MHA_CHAPTER}.html" in href for href in results):
        failures.append(f"search for 'multi-head' does not list {MHA_CHAPTER}: {results}")
    if third_party(seen["requests"]) or seen["console_errors"] or seen["page_errors"]:
        failures.append(f"search page: {third_party(seen['requests'])} {seen['console_errors']} {seen['page_errors']}")
    context.close()
    seconds = time.perf_counter() - start

    report(rows, seconds)
    assert not failures, "\n".join(failures)


def report(rows, seconds):
    """Write the per-page table to _build/screenshots/report.{txt,json} and show it at the end of the run."""
    kb = lambda n: f"{n / 1000:,.0f} kB"  # noqa: E731
    lines = [f"{'page':<34} {'requests':>8} {'3rd-party':>9} {'transferred':>11} {'decoded':>10} "
             f"{'page+images':>11} {'math':>5}  screenshot"]
    for r in rows:
        lines.append(f"{r['page']:<34} {r['requests']:>8} {r['third_party']:>9} {kb(r['transferred']):>11} "
                     f"{kb(r['decoded']):>10} {kb(r['page_and_images']):>11} {r['math']:>5}  {r['screenshot']}")
    lines.append(f"{len(rows)} pages checked in {seconds:.1f} s (transferred: gzip, first visit, empty cache)")
    (SCREENSHOTS / "report.txt").write_text("\n".join(lines) + "\n")
    (SCREENSHOTS / "report.json").write_text(json.dumps(rows, indent=1))
    SUMMARY_LINES.extend(lines)
