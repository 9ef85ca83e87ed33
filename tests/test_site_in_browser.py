"""Open every page of the built site in headless Chromium, served from localhost, and check what a reader gets.

For each page: no request leaves localhost, nothing fails to load, the console shows no error, the math is
typeset by MathJax, every image has loaded and has alt text, and the headings are in order. Each chapter page
(built from book/NN_*.ipynb) has a Colab button for its notebook rendered for Colab (colab/NN_*.ipynb), and the
search finds the MHA chapter. The Chinese edition, built into the site's zh_CN folder, is checked page by page in
the same way (its chapters' Colab buttons open colab/zh_CN/), and its search finds 分组查询注意力 and 键值缓存.

Accessibility is measured: axe-core (the copy shipped inside the `axe-playwright-python` wheel, injected into the
page, so no request is made) runs on every page, and any critical or serious violation fails the test. Its
colour-contrast rule, three quarters of axe's time (4.7 of 6.3 s on chapter 12's page), runs on a page of each kind
(CONTRAST_PAGES: the pages share one theme's styles) and on every page with an interactive view (its own colours).

Interactive views (code/attention_book/figures/interactive.py: a root ``.ab-view`` whose controls carry
``.ab-control`` and which writes what it shows into ``root.dataset.state``) are exercised on every page that has
one: each control must be reached with Tab (or with the arrow keys, in a row that holds one Tab stop), tokens are
focused and hovered, buttons pressed (Enter) and clicked, range inputs moved with the arrow keys, selects changed by
keyboard and by choosing an option; every kind of action must change ``root.dataset.state``, a key press must leave
the focus where it was (or where the arrow keys moved it), and the view may log no console error and make no request.
``test_the_view_check_itself`` proves the check on a small page with a working and a broken view.

Screenshots (each page's first screen, the whole page when it has a problem, and each view after the
interactions), a per-page report (requests, bytes, axe violations by impact, views) and axe's findings (axe.txt,
axe.json) go to _build/screenshots/. The server compresses text with gzip, as static hosts such as GitHub Pages do,
so "transferred" is what a first visit downloads.

Chromium: Debian's `chromium` package at /usr/bin/chromium (or the path in $CHROMIUM); `make test` installs it
with apt when it is missing. Playwright drives it and downloads no browser of its own.
"""
import contextlib
import functools
import gzip
import http.server
import json
import pathlib
import re
import threading
import time
import urllib.parse

import pytest

from conftest import ROOT, SUMMARY_LINES, chapter_paths
from book import colab_url
from views import CHROMIUM

SCREENSHOTS = ROOT / "_build" / "screenshots"
EDITIONS = ("", "zh_CN/")  # the English site, and the Chinese one in its zh_CN folder (scripts/translations.py)
# (search page and query, a chapter its results must list) in each edition
SEARCHES = [("search.html?q=multi-head", "03_multi_head"),
            ("zh_CN/search.html?q=分组查询注意力", "08_grouped_query"),
            ("zh_CN/search.html?q=键值缓存", "06_kv_cache")]
MAX_PAGE_BYTES = 2 * 10**6  # a page with its images, and everything a first visit transfers
MAX_IMAGE_PIXELS = 2000  # figures are drawn at 100 DPI; the text column is about 800 pixels wide
COMPRESSIBLE = {".html", ".js", ".css", ".svg", ".json", ".txt", ".map", ".inv"}
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
AXE_IMPACTS = ("critical", "serious", "moderate", "minor")
AXE_FAILING = {"critical", "serious"}  # moderate and minor violations are reported, not failed
# Colour contrast is checked on these pages and on every page with an interactive view: the intro, a chapter page with
# every kind of cell output, figure and admonition (12), the glossary, the instructors' guide (its tables), the search,
# and two pages of the Chinese edition (its fonts, the same styles).
CONTRAST_PAGES = {"book/intro.html", "book/12_real_llm.html", "book/glossary.html", "book/instructors.html",
                  "search.html", "zh_CN/book/intro.html", "zh_CN/book/12_real_llm.html"}

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


@contextlib.contextmanager
def serve(folder: pathlib.Path):
    """Serve ``folder`` on a free localhost port; yields the base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def site(built_book):
    """The built site, served on a free localhost port: yields (html folder, base URL)."""
    assert built_book.returncode == 0, built_book.log[-3000:]
    with serve(built_book.html) as base:
        yield built_book.html, base



def site_pages(html: pathlib.Path):
    """Every HTML page of the site, relative to its root (the redirect index.html excepted)."""
    pages = []
    for path in sorted(html.rglob("*.html")):
        rel = path.relative_to(html)
        if any(part.startswith("_") for part in rel.parts):
            continue  # _static, _sources, _images (of either edition): assets, not pages
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
    page.goto(url, wait_until="load")  # the caller then waits for MathJax and its fonts (_PAGE_FACTS)
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


def run_axe(page, contrast=True):
    """axe-core's violations on the page as loaded: [{id, impact, help, nodes: [CSS targets]}]; without its
    colour-contrast rule when ``contrast`` is false."""
    from axe_playwright_python.sync_playwright import Axe

    options = {"resultTypes": ["violations"]}
    if not contrast:
        options["rules"] = {"color-contrast": {"enabled": False}}
    found = Axe().run(page, options=options).response["violations"]
    return [{"id": v["id"], "impact": v["impact"] or "minor", "help": v["help"],
             "nodes": [" ".join(map(str, n["target"])) for n in v["nodes"]]} for v in found]


def axe_counts(violations):
    """Violated rules and their nodes, by impact: {impact: [rules, nodes]}."""
    counts = {impact: [0, 0] for impact in AXE_IMPACTS}
    for v in violations:
        counts[v["impact"]][0] += 1
        counts[v["impact"]][1] += len(v["nodes"])
    return counts


def axe_problems(violations):
    return [f"axe-core {v['impact']} violation {v['id']} ({v['help']}) on {len(v['nodes'])} node(s): "
            f"{v['nodes'][:5]}" for v in violations if v["impact"] in AXE_FAILING]


# Interactive views. kindOf: what a control is, hence how the test drives it; keyFor: the key that changes it.
_VIEW_JS = """
const kindOf = el => {
  const tag = el.tagName.toLowerCase(), type = (el.getAttribute('type') || '').toLowerCase();
  if (tag === 'button' || el.getAttribute('role') === 'button' || (tag === 'input' && ['button', 'submit', 'reset']
      .includes(type))) return 'button';
  if (tag === 'select') return 'select';
  if (tag === 'input' && type === 'range') return 'range';
  if (tag === 'input' && type === 'number') return 'number';
  if (tag === 'input' && ['checkbox', 'radio'].includes(type)) return 'checkbox';
  if (tag === 'input' || tag === 'textarea') return 'text';
  return 'token';
};
const keyFor = el => {
  const kind = kindOf(el), top = el.max === '' || el.max === undefined ? Infinity : Number(el.max);
  if (kind === 'button') return 'Enter';
  if (kind === 'checkbox') return 'Space';
  if (kind === 'range') return Number(el.value) >= top ? 'ArrowLeft' : 'ArrowRight';
  if (kind === 'number') return Number(el.value) >= top ? 'ArrowDown' : 'ArrowUp';
  if (kind === 'select') return el.selectedIndex >= el.options.length - 1 ? 'ArrowUp' : 'ArrowDown';
  return null;
};
const describe = el => (el.getAttribute('aria-label') || el.textContent || el.getAttribute('name') || el.tagName)
  .trim().slice(0, 40);
"""
_VIEW_CONTROLS = "uid => {" + _VIEW_JS + """
  return [...document.getElementById(uid).querySelectorAll('.ab-control')].map(el => ({
    kind: kindOf(el), name: describe(el), disabled: !!el.disabled, visible: el.getClientRects().length > 0,
    tabbable: el.tabIndex >= 0}));
}"""
_VIEW_FOCUS = "uid => {" + _VIEW_JS + """
  const root = document.getElementById(uid), el = document.activeElement;
  const inside = !!el && el !== root && root.contains(el);
  return {inside: inside, index: inside ? [...root.querySelectorAll('.ab-control')].indexOf(el) : -1,
          kind: inside ? kindOf(el) : null, key: inside ? keyFor(el) : null, state: root.dataset.state ?? null};
}"""
_VIEW_STATE = "uid => document.getElementById(uid).dataset.state ?? null"
_VIEW_ENTER = """uid => {  // a focusable marker just before the view, focused, so that Tab walks into the view
  const mark = document.createElement('span');
  mark.tabIndex = 0; mark.id = 'ab-test-before-view';
  document.getElementById(uid).before(mark);
  mark.focus();
}"""
_VIEW_LEAVE = "() => document.getElementById('ab-test-before-view')?.remove()"
_VIEW_REFOCUS = "([uid, i]) => document.getElementById(uid).querySelectorAll('.ab-control')[i]?.focus()"
# What each kind of control must do: the actions, each of which must change root.dataset.state at least once.
VIEW_ACTIONS = {"token": ("keyboard focus", "hover"), "button": ("keyboard", "click"), "range": ("keyboard",),
                "number": ("keyboard",), "select": ("keyboard", "choose an option"), "checkbox": ("keyboard",),
                "text": ()}
MAX_MOUSE_TARGETS = 12  # hover or click at most this many controls of one kind
MOUSE_TIMEOUT_MS = 5_000  # a control the mouse cannot reach (hidden, covered) fails the check, not the run


def exercise_view(page, uid, seen, shot):
    """Drive the view ``#uid`` by keyboard and mouse; screenshot it to ``shot``. Returns (problems, summary)."""
    from playwright.sync_api import Error as PlaywrightError

    problems, changed, states = [], {}, set()
    requests_before, errors_before = len(seen["requests"]), len(seen["console_errors"]) + len(seen["page_errors"])
    controls = page.evaluate(_VIEW_CONTROLS, uid)
    state = page.evaluate(_VIEW_STATE, uid)
    states.add(state)
    if not state:
        problems.append("root.dataset.state is empty once the view has started (the view must describe what it "
                        "shows there)")
    if not controls:
        problems.append("no element with class ab-control: nothing to interact with")

    def did(kind, action, before, after):
        states.add(after)
        changed[kind, action] = changed.get((kind, action), False) or after != before

    # Keyboard: Tab from just before the view through all of it, acting on each control as focus reaches it. A
    # row of tokens or buttons may hold one Tab stop and move the focus with the arrow keys (a roving tabindex):
    # where the view has controls that Tab skips, the arrow keys walk the row that Tab has entered.
    page.evaluate(_VIEW_ENTER, uid)
    reached = set()
    roving = any(not c["tabbable"] and c["visible"] and not c["disabled"] for c in controls)
    for _ in range(2 * len(controls) + 10):
        before = page.evaluate(_VIEW_STATE, uid)
        page.keyboard.press("Tab")
        at = page.evaluate(_VIEW_FOCUS, uid)
        if not at["inside"]:
            break
        if at["index"] < 0:
            continue  # something focusable inside the view that is not a control
        reached.add(at["index"])
        if at["kind"] == "token":
            did("token", "keyboard focus", before, at["state"])
        if at["kind"] in ("token", "button") and roving:
            for key in ("ArrowRight", "ArrowLeft"):
                here = at
                for _ in range(len(controls)):
                    page.keyboard.press(key)
                    there = page.evaluate(_VIEW_FOCUS, uid)
                    if not there["inside"] or there["index"] in (-1, here["index"]) or there["kind"] != at["kind"]:
                        break
                    reached.add(there["index"])
                    did(at["kind"], "keyboard focus" if at["kind"] == "token" else "keyboard", here["state"],
                        there["state"])
                    here = there
            at = page.evaluate(_VIEW_FOCUS, uid)
            if at["index"] < 0:
                continue
        if at["kind"] != "token" and at["key"]:
            page.keyboard.press(at["key"])
            after = page.evaluate(_VIEW_FOCUS, uid)
            did(at["kind"], "keyboard", at["state"], after["state"])
            if after["index"] != at["index"]:
                name = controls[at["index"]]["name"] if at["index"] < len(controls) else at["index"]
                problems.append(f"pressing {at['key']} on {at['kind']} {name!r} moved the keyboard focus away from it "
                                "(did the view redraw its controls?)")
                page.evaluate(_VIEW_REFOCUS, [uid, at["index"]])
    page.evaluate(_VIEW_LEAVE)
    unreached = [f"{c['kind']} {c['name']!r}" for i, c in enumerate(controls)
                 if i not in reached and c["visible"] and not c["disabled"]]
    if unreached:
        problems.append(f"controls that neither Tab nor the arrow keys reach (not keyboard-accessible): {unreached}")

    # Mouse: hover tokens, click buttons, choose another option of each select.
    control = page.locator(f"#{uid} .ab-control")
    for kind, action in (("token", "hover"), ("button", "click"), ("select", "choose an option")):
        indices = [i for i, c in enumerate(controls) if c["kind"] == kind and c["visible"] and not c["disabled"]]
        for i in indices[:MAX_MOUSE_TARGETS]:
            before = page.evaluate(_VIEW_STATE, uid)
            try:
                if kind == "token":
                    control.nth(i).hover(timeout=MOUSE_TIMEOUT_MS)
                elif kind == "button":
                    control.nth(i).click(timeout=MOUSE_TIMEOUT_MS)
                else:
                    values = control.nth(i).evaluate("el => [...el.options].map(o => o.value)")
                    others = [v for v in values if v != control.nth(i).input_value()]
                    if not others:
                        continue
                    control.nth(i).select_option(others[0], timeout=MOUSE_TIMEOUT_MS)
            except PlaywrightError as error:
                problems.append(f"{action} on {kind} {controls[i]['name']!r} failed: {str(error).splitlines()[0]}")
                continue
            did(kind, action, before, page.evaluate(_VIEW_STATE, uid))

    kinds = sorted({c["kind"] for c in controls})
    for kind in kinds:
        for action in VIEW_ACTIONS[kind]:
            if not changed.get((kind, action)):
                problems.append(f"{kind} controls: {action} never changed root.dataset.state (it stayed {state!r})")
    page.mouse.move(0, 0)
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.locator(f"#{uid}").screenshot(path=str(shot))
    if requests := [r.url for r in seen["requests"][requests_before:]]:
        problems.append(f"requests made while interacting with the view: {requests}")
    if errors := (seen["console_errors"] + seen["page_errors"])[errors_before:]:
        problems.append(f"console errors while interacting with the view: {errors}")
    summary = {"id": uid, "controls": {k: sum(c["kind"] == k for c in controls) for k in kinds},
               "actions_that_changed_the_state": sorted(f"{k} {a}" for (k, a), ok in changed.items() if ok),
               "states_seen": len(states), "screenshot": shot.relative_to(ROOT).as_posix() if shot.is_relative_to(ROOT)
               else str(shot)}
    return [f"view {uid}: {p}" for p in problems], summary


def view_ids(page):
    return page.eval_on_selector_all(".ab-view", "views => views.map(v => v.id)")


def view_shot_name(page_name: str, uid: str, taken: set) -> str:
    """<page>__<the view's id prefix>.png; a second view of the same name on the page gets -2, and so on."""
    stem = f"{page_name}__{uid.rsplit('-', 1)[0]}"
    name, n = stem, 1
    while name in taken:
        n += 1
        name = f"{stem}-{n}"
    taken.add(name)
    return name + ".png"


def test_every_page_in_the_browser(site, browser):
    html, base = site
    pages = site_pages(html)
    chapters = {f"{edition}book/{path.stem}.html": colab_url(f"colab/{edition}{path.name}")
                for path in chapter_paths() for edition in EDITIONS}
    missing = sorted(set(chapters) - set(pages))
    assert not missing, f"chapters with no page in the site: {missing}"
    assert CONTRAST_PAGES <= set(pages), f"CONTRAST_PAGES not in the site: {sorted(CONTRAST_PAGES - set(pages))}"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for old in [*SCREENSHOTS.glob("*.jpg"), *SCREENSHOTS.glob("*.png")]:
        old.unlink()

    start = time.perf_counter()
    failures, rows, axe_found = [], [], {}
    for rel in pages:
        context, page, seen = open_page(browser, base + rel)
        facts = page.evaluate(_PAGE_FACTS)  # after MathJax has typeset and the fonts it asked for have loaded
        problems = []
        # What the page requested and logged until then (axe, run below, requests stylesheets of its own).
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
            want = chapters[rel]
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

        # Accessibility, on the page as a reader first gets it.
        uids = view_ids(page)
        axe_found[rel] = violations = run_axe(page, contrast=rel in CONTRAST_PAGES or bool(uids))
        problems += axe_problems(violations)

        # Interactive views: drive each one, then screenshot it.
        page_name = rel.replace("/", "__").removesuffix(".html")
        views, taken = [], set()
        for uid in uids:
            view_problems, summary = exercise_view(page, uid, seen, SCREENSHOTS / view_shot_name(page_name, uid, taken))
            problems += view_problems
            views.append(summary)

        # The first screen of every page, and the whole page when it has a problem: the 27 full-page shots took 35 s
        # of the test's 220, the first screens 4 s, and no check reads them.
        shot = SCREENSHOTS / (page_name + ".jpg")
        page.screenshot(path=str(shot), full_page=bool(problems), type="jpeg", quality=70)
        context.close()
        rows.append({"page": rel, "requests": len(seen["requests"]), "third_party": len(third_party(seen["requests"])),
                     "transferred": transferred, "decoded": decoded, "page_and_images": page_and_images,
                     "images": len(facts["images"]), "math": facts["mathTypeset"],
                     "axe": axe_counts(violations), "views": views,
                     "screenshot": shot.relative_to(ROOT).as_posix()})
        failures += [f"{rel}: {p}" for p in problems]

    # Search: each edition's search lists the chapter that a reader looking for a term wants.
    for query, chapter in SEARCHES:
        context, page, seen = open_page(browser, base + query)
        page.wait_for_selector("#search-results ul.search li a", timeout=15_000)
        results = page.eval_on_selector_all("#search-results ul.search li a", "links => links.map(a => a.href)")
        if not any(f"{chapter}.html" in href for href in results):
            failures.append(f"{query} does not list {chapter}: {results}")
        if third_party(seen["requests"]) or seen["console_errors"] or seen["page_errors"]:
            failures.append(f"{query}: {third_party(seen['requests'])} {seen['console_errors']} {seen['page_errors']}")
        context.close()
    seconds = time.perf_counter() - start

    report(rows, seconds)
    report_axe(axe_found)
    assert not failures, "\n".join(failures)


def report(rows, seconds):
    """Write the per-page table to _build/screenshots/report.{txt,json} and show it at the end of the run."""
    kb = lambda n: f"{n / 1000:,.0f} kB"  # noqa: E731
    lines = [f"{'page':<34} {'requests':>8} {'3rd-party':>9} {'transferred':>11} {'decoded':>10} "
             f"{'page+images':>11} {'math':>5} {'axe c/s/m/n':>11} {'views':>5}  screenshot"]
    for r in rows:
        axe = "/".join(str(r["axe"][impact][0]) for impact in AXE_IMPACTS)
        lines.append(f"{r['page']:<34} {r['requests']:>8} {r['third_party']:>9} {kb(r['transferred']):>11} "
                     f"{kb(r['decoded']):>10} {kb(r['page_and_images']):>11} {r['math']:>5} {axe:>11} "
                     f"{len(r['views']):>5}  {r['screenshot']}")
    views = [(r["page"], v) for r in rows for v in r["views"]]
    for page, v in views:
        lines.append(f"  view {v['id']} on {page}: controls {v['controls']}, {v['states_seen']} states seen, "
                     f"screenshot {v['screenshot']}")
    if not views:
        lines.append("no page has an interactive view (.ab-view) yet: the view check ran on none "
                     "(test_the_view_check_itself proves it on a small page)")
    lines.append(f"{len(rows)} pages checked in {seconds:.1f} s (transferred: gzip, first visit, empty cache; "
                 "axe c/s/m/n: rules violated, critical/serious/moderate/minor; details in axe.txt)")
    (SCREENSHOTS / "report.txt").write_text("\n".join(lines) + "\n")
    (SCREENSHOTS / "report.json").write_text(json.dumps(rows, indent=1))
    SUMMARY_LINES.extend(lines)


def report_axe(found):
    """axe-core's findings per page: _build/screenshots/axe.txt (counts by impact, then each rule) and axe.json."""
    lines = [f"{'page':<34} " + " ".join(f"{impact:>8}" for impact in AXE_IMPACTS) + "   (rules violated, nodes)"]
    for rel, violations in found.items():
        counts = axe_counts(violations)
        lines.append(f"{rel:<34} " + " ".join(f"{f'{r}/{n}':>8}" for r, n in counts.values()))
        for v in sorted(violations, key=lambda v: AXE_IMPACTS.index(v["impact"])):
            lines.append(f"    {v['impact']:<8} {v['id']}: {v['help']} ({len(v['nodes'])} nodes: "
                         f"{', '.join(v['nodes'][:3])}{', ...' if len(v['nodes']) > 3 else ''})")
    pages_with = {impact: sum(any(v["impact"] == impact for v in vs) for vs in found.values())
                  for impact in AXE_IMPACTS}
    lines.append(f"{len(found)} pages; pages with a violation, by impact: {pages_with} "
                 f"(the test fails on {sorted(AXE_FAILING)})")
    (SCREENSHOTS / "axe.txt").write_text("\n".join(lines) + "\n")
    (SCREENSHOTS / "axe.json").write_text(json.dumps(found, indent=1))


def _demo_view(name, works=True):
    """A small view in the contract of figures/interactive.py: three tokens, a button, a range and a select.
    The working view's tokens hold one Tab stop and move the focus with the arrow keys (a roving tabindex). When
    ``works`` is false its script sets root.dataset.state once and never again, and its last token has no tabindex
    (the keyboard cannot reach it)."""
    import matplotlib.pyplot as plt

    from attention_book.figures.interactive import View

    body = ('<div role="group" aria-label="tokens">'
            + "".join(f'<span class="ab-control tok"{tab} data-i="{i}">{t}</span>'
                      for i, (t, tab) in enumerate(zip(["the", "cat", "sat"],
                                                       ([' tabindex="0"'] + [' tabindex="-1"'] * 2 if works else
                                                        [' tabindex="0"'] * 2 + [""]), strict=True)))
            + '</div><button type="button" class="ab-control">Next head</button>'
            '<label>Layer <input class="ab-control" type="range" min="0" max="3" value="0"></label>'
            '<label>Show <select class="ab-control"><option value="rows">rows</option>'
            '<option value="columns">columns</option></select></label><p class="out" aria-live="polite"></p>')
    script = ("var st = {token: 0, head: 0, layer: 0, show: 'rows'};"
              "function show() { var s = 'token ' + data.tokens[st.token] + ', head ' + st.head + ', layer ' + "
              "st.layer + ', ' + st.show; root.dataset.state = s; root.querySelector('.out').textContent = s; }"
              "show();")
    if works:
        script += ("var toks = root.querySelectorAll('.tok');"
                   "toks.forEach(function (el, i) {"
                   " function pick() { st.token = i; toks.forEach(function (t, j) { t.tabIndex = j === i ? 0 : -1; });"
                   " show(); }"
                   " el.addEventListener('focus', pick); el.addEventListener('mouseenter', pick);"
                   " el.addEventListener('keydown', function (e) {"
                   "  var to = {ArrowLeft: i - 1, ArrowRight: i + 1}[e.key]; if (to === undefined) return;"
                   "  e.preventDefault(); toks[Math.max(0, Math.min(toks.length - 1, to))].focus(); }); });"
                   "root.querySelector('button').addEventListener('click', function () {"
                   " st.head = (st.head + 1) % 2; show(); });"
                   "root.querySelector('input').addEventListener('input', function (e) {"
                   " st.layer = Number(e.target.value); show(); });"
                   "root.querySelector('select').addEventListener('change', function (e) {"
                   " st.show = e.target.value; show(); });")
    fig, ax = plt.subplots(figsize=(2, 1))
    ax.text(0.5, 0.5, "the cat sat", ha="center")
    return View(name, {"tokens": ["the", "cat", "sat"]}, body, script, "#{uid} .tok { padding: 0 4px; }", fig,
                "A demonstration view: the weights of one token for one head and layer.")


def test_the_view_check_itself(browser, tmp_path):
    """The view check on a page built here: it passes a working view; it catches a view whose state never changes
    and a control the keyboard cannot reach, a view that makes a request, logs an error and redraws the control
    that has the focus; and axe-core catches an unlabelled control."""
    good, broken, leaky = _demo_view("good-view"), _demo_view("broken-view", works=False), _demo_view("leaky-view")
    leaky.script += ("root.querySelector('button').addEventListener('click', function () {"
                     " console.error('boom'); new Image().src = '/leak.png';"
                     " var b = root.querySelector('button'); b.replaceWith(b.cloneNode(true)); });")
    unlabelled = '<div id="unlabelled"><select><option>a</option><option>b</option></select></div>'
    (tmp_path / "views.html").write_text(
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Views</title>'
        '<link rel="icon" href="data:,"></head><body><main>'
        f"<h1>Views</h1>{good.html()}{broken.html()}{leaky.html()}{unlabelled}</main></body></html>")
    with serve(tmp_path) as base:
        context, page, seen = open_page(browser, base + "views.html")
        assert view_ids(page) == [good.uid, broken.uid, leaky.uid]
        assert not seen["console_errors"] + seen["page_errors"], seen
        violations = run_axe(page)
        taken = set()
        results = {view.name: exercise_view(page, view.uid, seen, tmp_path / view_shot_name("views", view.uid, taken))
                   for view in (good, broken, leaky)}
        context.close()

    problems, summary = results["good-view"]
    assert problems == [], problems
    assert summary["controls"] == {"button": 1, "range": 1, "select": 1, "token": 3}
    assert summary["states_seen"] >= 5, summary
    assert (tmp_path / "views__good-view.png").stat().st_size > 1000

    problems, summary = results["broken-view"]
    text = "\n".join(problems)
    for kind, actions in VIEW_ACTIONS.items():
        for action in actions if kind in summary["controls"] else ():
            assert f"{kind} controls: {action} never changed" in text, (kind, action, text)
    assert summary["states_seen"] == 1
    assert "nor the arrow keys reach (not keyboard-accessible): [\"token 'sat'\"]" in text, text

    problems, _ = results["leaky-view"]
    assert any("requests made while interacting" in p and "leak.png" in p for p in problems), problems
    assert any("console errors while interacting" in p and "boom" in p for p in problems), problems
    assert any("pressing Enter on button 'Next head' moved the keyboard focus" in p for p in problems), problems

    failing = axe_problems(violations)
    assert failing and all("#unlabelled" in p for p in failing), violations
