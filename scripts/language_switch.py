"""Sphinx extension: every page links to the same page in the book's other edition (English, 中文).

The English site is built into _build/html and the Chinese one into _build/html/zh_CN (scripts/translations.py), so
the page ``book/03_multi_head`` is ``zh_CN/book/03_multi_head.html`` from the English site's root and
``../book/03_multi_head.html`` from the Chinese one's. The link sits in the primary sidebar under the book's title
(_templates/language-switch.html, listed in _config.yml's html_sidebars), labelled in the language it leads to, with
``lang`` and ``hreflang`` set so that a screen reader reads it in that language; the page's head also names its other
edition (``<link rel="alternate" hreflang=...>``).
"""
CHINESE = "zh_CN"


def other_edition(language, pagename):
    """(relative address, label, BCP 47 language tag) of ``pagename`` in the other edition."""
    up = "../" * pagename.count("/")
    if language == CHINESE:
        return f"../{up}{pagename}.html", "English", "en"
    return f"{up}{CHINESE}/{pagename}.html", "中文", "zh-CN"


def add_language_switch(app, pagename, templatename, context, doctree) -> None:
    url, label, tag = other_edition(app.config.language, pagename)
    context["language_switch"] = {"url": url, "label": label, "tag": tag,
                                  "name": "语言" if tag == "en" else "Language"}
    context["metatags"] = context.get("metatags", "") + f'\n<link rel="alternate" hreflang="{tag}" href="{url}" />'


def setup(app):
    app.connect("html-page-context", add_language_switch)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
