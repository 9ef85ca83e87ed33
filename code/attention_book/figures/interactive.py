"""Interactive views that work offline: one display bundle of self-contained HTML with a PNG fallback.

A view is a few KB of plain JavaScript, CSS and inlined JSON data, emitted as one ``text/html`` output beside an
``image/png`` output (a static drawing of the same thing, for builds and viewers that drop scripts). Rules, which
``View`` enforces or makes easy:

- no network request of any kind and no file request beyond the page itself: no require.js, d3, jQuery or CDN, no
  ``src=`` or ``href=`` that points anywhere, no ``fetch`` or ``XMLHttpRequest``;
- at most ``MAX_BYTES`` (30 KB) of code and data;
- element ids derived from a hash of the data (``View.uid``), so the stored HTML is the same on every run that
  computes the same data, and two views on one page never collide;
- keyboard access and a text alternative (``description``, shown to screen readers and in the fallback's alt).

The JavaScript receives ``root`` (the view's outer element) and ``data`` (the parsed JSON) and must only touch
elements inside ``root``. Every control and every focusable item carries the class ``ab-control`` and is reachable
with the keyboard (a button or an input; in a row of items such as tokens, one Tab stop and the arrow keys), and the
script writes a short text describing what the view shows now into ``root.dataset.state`` at start and after every
change: the browser tests focus, hover, click and move each control and check that the state changes. It runs in the
site's page (Jupyter Book inserts the HTML as is) and in Colab's output frame.
"""
import base64
import hashlib
import html
import io
import json
import re

MAX_BYTES = 30_000
_FORBIDDEN = re.compile(r"\b(?:fetch|XMLHttpRequest|WebSocket|EventSource|importScripts|sendBeacon)\b|\bsrc\s*=|"
                        r"\bhref\s*=|https?://|require\s*\(|<iframe|<link|@import")


class View:
    """An interactive view: ``display(View(...))`` or make it the last expression of a cell.

    Args:
        name: a short kebab-case name, e.g. "attention-explorer"; the prefix of every element id.
        data: JSON-serialisable data the view shows (round floats to a few decimals: they are inlined).
        body: the view's HTML, inside the outer element; write ``{uid}`` wherever an id must be unique.
        script: JavaScript run once with ``root`` and ``data`` in scope.
        style: CSS; prefix every rule with ``#{uid}`` so that it applies to this view only.
        fallback: a matplotlib figure drawing the same thing (its PNG is the static fallback; the figure is closed).
        description: a sentence saying what the view shows, for screen readers and as the fallback's alt text.
    """

    def __init__(self, name, data, body, script, style, fallback, description):
        if not re.fullmatch(r"[a-z][a-z0-9-]*", name):
            raise ValueError(f"name={name!r} must be kebab-case: lower-case letters, digits and '-'")
        if not description:
            raise ValueError("description must say what the view shows (it is the text alternative)")
        self.name, self.data, self.description = name, data, description
        self._json = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
        digest = hashlib.sha256("\0".join([name, self._json, body, script, style]).encode()).hexdigest()[:10]
        self.uid = f"{name}-{digest}"
        self.body, self.script, self.style = body.replace("{uid}", self.uid), script, style.replace("{uid}", self.uid)
        for part, text in (("body", self.body), ("script", script), ("style", self.style)):
            found = _FORBIDDEN.search(text)
            if found:
                raise ValueError(f"the view's {part} contains {found.group(0)!r}: a view may make no request")
        self.png = _png(fallback)
        size = len(self.html().encode())
        if size > MAX_BYTES:
            raise ValueError(f"the view is {size:,} bytes of code and data; the limit is {MAX_BYTES:,}")

    def html(self) -> str:
        """The self-contained HTML: style, the view's elements, a screen-reader description, the data and script."""
        data = self._json.replace("</", "<\\/")  # the JSON cannot close the script element
        return (f'<div id="{self.uid}" class="ab-view" role="figure" aria-label="{html.escape(self.description)}">'
                f"<style>{self.style}</style>{self.body}"
                f'<script type="application/json" id="{self.uid}-data">{data}</script>'
                f"<script>(function () {{ var root = document.getElementById({json.dumps(self.uid)}); "
                f"var data = JSON.parse(document.getElementById({json.dumps(self.uid + '-data')}).textContent); "
                f"{self.script}\n}})();</script></div>")

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/html": self.html(), "image/png": base64.b64encode(self.png).decode(),
                "text/plain": f"<{self.name}: {self.description}>"}, {"image/png": {"alt": self.description}}


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()
