"""Test helper for the interactive views (figures/interactive.py): open one view's HTML alone in headless Chromium,
as Colab shows a cell's output, in its own frame, and watch what it requests and logs.

    from views import needs_chromium, open_view

    pytestmark = needs_chromium

    def test_something(browser):                      # conftest.py's session-wide headless Chromium
        with open_view(browser, view) as shown:       # a View, or its HTML
            shown.root.locator("select").select_option("1")
            assert shown.state() == "layer 1, ..."
        # leaving the block asserts 0 console errors, 0 page errors and 0 requests beyond the two pages

The outer page (http://notebook.test/) holds an <iframe> whose document (http://output.test/) is the view's HTML and
nothing else, like Colab's output frame. Every request goes through one route: the two pages are served from
memory, anything else is aborted and recorded, so a view that asks for a script, a font or an image fails the test.
No network is touched. Chromium: /usr/bin/chromium or $CHROMIUM. ``open_alone`` shows a view as a page's whole
body instead, without the frame.
"""
import contextlib
import dataclasses
import os
import pathlib

import pytest

CHROMIUM = pathlib.Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
OUTER_URL = "http://notebook.test/"
FRAME_URL = "http://output.test/output.html"

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.is_file(),
    reason=f"Chromium is not installed at {CHROMIUM}, so the views were NOT checked in a browser. `make test` "
           "installs it with `apt-get install chromium` when it can; install it (or set $CHROMIUM) and run again.")


@contextlib.contextmanager
def chromium():
    """Headless Chromium driven by Playwright (which downloads no browser of its own)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                             args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser
        finally:
            browser.close()


@dataclasses.dataclass
class ShownView:
    page: object  # the outer Playwright Page (mouse and keyboard act through it)
    frame: object  # the output frame, a Playwright Frame
    root: object  # a Locator for the (first) view's outer element, div.ab-view
    requests: list  # every URL requested, the two pages included
    blocked: list  # URLs that were neither page: aborted
    console_errors: list
    page_errors: list

    def state(self) -> str:
        """The view's own account of what it shows (root.dataset.state)."""
        return self.root.evaluate("root => root.dataset.state")

    def focused(self):
        """The focused element of the output frame, as (class name, text)."""
        return self.frame.evaluate("() => [document.activeElement.className, document.activeElement.textContent]")

    def problems(self) -> list[str]:
        found = []
        if self.blocked:
            found.append(f"requests beyond the page: {self.blocked}")
        if self.console_errors or self.page_errors:
            found.append(f"console errors: {self.console_errors + self.page_errors}")
        return found


def _document(body: str) -> str:
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>output</title></head>'
            f"<body>{body}</body></html>")


@contextlib.contextmanager
def open_view(browser, view, width=1000, height=800, check=True):
    """Show ``view`` (a View or its HTML) alone in an output frame; yield a ShownView.

    With check=True, leaving the block fails the test on any console error, page error or request beyond the page.
    """
    html = view if isinstance(view, str) else view.html()
    context = browser.new_context(viewport={"width": width, "height": height}, service_workers="block")
    page = context.new_page()
    shown = ShownView(page, None, None, [], [], [], [])
    pages = {OUTER_URL: _document(f'<iframe title="output" src="{FRAME_URL}" style="width:{width - 40}px;'
                                  f'height:{height - 40}px;border:0"></iframe>'),
             FRAME_URL: _document(html)}

    def route(request_route):
        url = request_route.request.url
        shown.requests.append(url)
        if url in pages:
            request_route.fulfill(status=200, content_type="text/html; charset=utf-8", body=pages[url])
        else:
            shown.blocked.append(url)
            request_route.abort()

    context.route("**/*", route)
    page.on("console", lambda m: m.type == "error" and shown.console_errors.append(m.text))
    page.on("pageerror", lambda e: shown.page_errors.append(str(e)))
    try:
        page.goto(OUTER_URL, wait_until="load")
        shown.frame = page.frame(url=FRAME_URL)
        assert shown.frame is not None, f"the output frame did not load: {[f.url for f in page.frames]}"
        shown.root = shown.frame.locator(".ab-view").first
        shown.root.wait_for()
        yield shown
        page.wait_for_timeout(50)  # let late errors and requests arrive
        if check:
            assert not shown.problems(), "\n".join(shown.problems())
    finally:
        context.close()


@dataclasses.dataclass
class ShownPage:
    """A view opened alone as a page's whole body (``open_alone``)."""
    page: object  # the Playwright Page
    requests: list  # every URL the view asked for (all refused)
    errors: list  # console and page errors

    def state(self) -> str:
        """The view's own account of what it shows (root.dataset.state)."""
        return self.page.eval_on_selector(".ab-view", "root => root.dataset.state")


@contextlib.contextmanager
def open_alone(browser, view, width=1000, height=800):
    """The view's HTML as the whole body of a fresh page (no server: set_content); every request is refused and
    recorded. Leaving the block asserts 0 requests and 0 console or page errors."""
    context = browser.new_context(viewport={"width": width, "height": height}, service_workers="block")
    shown = ShownPage(context.new_page(), [], [])

    def refuse(route):
        shown.requests.append(route.request.url)
        route.abort()

    context.route("**/*", refuse)
    shown.page.on("console", lambda m: m.type == "error" and shown.errors.append(m.text))
    shown.page.on("pageerror", lambda e: shown.errors.append(str(e)))
    try:
        shown.page.set_content(f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>view</title>'
                               f"</head><body>{view.html()}</body></html>")
        yield shown
        shown.page.wait_for_timeout(50)
        assert shown.requests == [], f"the view made requests: {shown.requests}"
        assert shown.errors == [], f"console errors: {shown.errors}"
    finally:
        context.close()
