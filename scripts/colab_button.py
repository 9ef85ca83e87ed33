"""Sphinx extension: each chapter page's Colab button opens the notebooks written for Colab.

Jupyter Book 1's launch button builds its Colab address from the page's own source, book/NN_name.ipynb, whose MyST
markup (citations, glossary terms, cross-references) Colab would show raw. So _config.yml turns that button off
(``launch_buttons.colab_url: ""``) and this extension adds, to every chapter page, a button of the same look (the
theme's rocket menu) with two entries: the student version (student/NN_name.ipynb) and the solved chapter
(colab/NN_name.ipynb), both rendered for Colab by scripts/student.py and scripts/colab.py. The addresses come from
scripts/book.py's colab_url, like the chapter headers' links.

sphinx-book-theme collects a page's header buttons in ``context["header_buttons"]``, which its ``html-page-context``
handler prep_header_buttons creates (priority 500) and its launch-button handler appends to (priority 501); this
one appends at the same priority.
"""
import re

from book import ROOT, colab_url

CHAPTER_PAGE = re.compile(r"book/(?P<stem>[0-9]{2}_[^/]+)")
COLAB_LOGO = "_static/images/logo_colab.png"  # shipped with sphinx-book-theme, served by the site itself


LABELS = {  # language -> the group's tooltip, then each entry's text and tooltip
    "en": ("Open this chapter in Colab", "Colab: exercises", "Open the student version in Colab",
           "Colab: with solutions", "Open the solved chapter in Colab"),
    "zh_CN": ("在 Colab 中打开本章", "Colab：练习", "在 Colab 中打开学生版", "Colab：附解答", "在 Colab 中打开解答版"),
}


def colab_buttons(name: str, language: str = "en") -> dict:
    """The header button (the theme's drop-down group) for the chapter book/``name``, in the site's ``language``:
    the Chinese site's opens the Chinese notebooks (colab/zh_CN/, student/zh_CN/: scripts/chinese_notebooks.py)."""
    group, exercises, exercises_tip, solved, solved_tip = LABELS.get(language, LABELS["en"])
    folder = "" if language not in LABELS or language == "en" else f"{language}/"
    return {
        "type": "group",
        "tooltip": group,
        "icon": "fas fa-rocket",
        "label": "launch-buttons",
        "buttons": [
            {"type": "link", "text": exercises, "tooltip": exercises_tip,
             "icon": COLAB_LOGO, "url": colab_url(f"student/{folder}{name}")},
            {"type": "link", "text": solved, "tooltip": solved_tip,
             "icon": COLAB_LOGO, "url": colab_url(f"colab/{folder}{name}")},
        ],
    }


def add_colab_buttons(app, pagename, templatename, context, doctree) -> None:
    """On a chapter's page (book/NN_name, from book/NN_name.ipynb), add its Colab button."""
    page = CHAPTER_PAGE.fullmatch(pagename)
    if page is None or "header_buttons" not in context:
        return
    name = f"{page.group('stem')}.ipynb"
    if (ROOT / "book" / name).is_file():
        language = getattr(getattr(app, "config", None), "language", None) or "en"
        context["header_buttons"].append(colab_buttons(name, language))


def setup(app):
    app.connect("html-page-context", add_colab_buttons, priority=501)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
