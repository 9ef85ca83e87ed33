"""The Chinese edition (zh_CN): its gettext catalogues, its site, and its search dictionary.

    python scripts/translations.py extract   # the English sources' messages -> _build/gettext/**/*.pot, then
                                             # locales/zh_CN/LC_MESSAGES/**/*.po updated by sphinx-intl: a new
                                             # message comes in untranslated, a changed one fuzzy
    python scripts/translations.py site      # the site in Chinese -> _build/html/zh_CN (make book, after the
                                             # English site in _build/html; --out elsewhere)

Both go through Jupyter Book's own Sphinx configuration (_config.yml, as `jupyter-book build` reads it), with the
settings below on top: `jupyter-book build` cannot take Sphinx's -D, so the builds call its build_sphinx with
them. One catalogue per page (gettext_compact off), without source line numbers, so that an English edit touches
only the messages it changes. The Chinese site is built with Sphinx's Chinese search, which splits words with jieba,
given the edition's terms (locales/zh_CN/terms.md) as a dictionary so that 分组查询注意力 is one word to find.
"""
import argparse
import copy
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LANGUAGE = "zh_CN"
LOCALES = ROOT / "locales"
CATALOGUES = LOCALES / LANGUAGE / "LC_MESSAGES"
TERMS = LOCALES / LANGUAGE / "terms.md"
GETTEXT = ROOT / "_build" / "gettext"
SITE = ROOT / "_build" / "html" / LANGUAGE  # beside the English site, which links to it from every page
JIEBA_DICT = ROOT / "_build" / f"jieba-{LANGUAGE}.txt"
TITLE = "逐头看懂注意力"  # "Attention, Head by Head"
FOOTER = ('<p>代码：<a href="https://opensource.org/license/mit">MIT 许可证</a>。'
          '文字与图：<a href="https://creativecommons.org/licenses/by/4.0/">CC BY 4.0</a>。</p>\n')

# The same for the catalogues' extraction and the Chinese build: a catalogue per page, no line numbers.
CATALOGUE_SETTINGS = {"gettext_compact": False, "gettext_location": False, "gettext_uuid": False,
                      "gettext_last_translator": "", "gettext_language_team": ""}


def terms():
    """[{english, chinese, allowed: [...], avoid: [...]}] from the table of locales/zh_CN/terms.md."""
    rows = []
    for line in TERMS.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 4 or cells[0] in ("English", "") or set(cells[0]) <= {"-"}:
            continue
        english, chinese, allowed, avoid = cells

        def listed(text):
            return [form.strip() for form in text.split(",") if form.strip()]

        rows.append({"english": english, "chinese": chinese, "allowed": listed(allowed), "avoid": listed(avoid)})
    return rows


def write_jieba_dictionary(path=JIEBA_DICT):
    """jieba's user dictionary (a word, a frequency and a tag per line): every Chinese term of the table, frequent
    enough that jieba keeps it whole."""
    words = sorted({row["chinese"] for row in terms() if any("\u4e00" <= ch <= "\u9fff" for ch in row["chinese"])})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{word.replace(' ', '')} 100000 n\n" for word in words), encoding="utf-8")
    return path


def sphinx(builder, outdir, doctrees, overrides):
    """Jupyter Book's Sphinx build of the book at ROOT, as `jupyter-book build . -W -n --keep-going` runs it, with
    ``overrides`` on top of _config.yml's settings. Returns Sphinx's status (0: no warning)."""
    from jupyter_book.sphinx import build_sphinx

    status = build_sphinx(ROOT, outdir, noconfig=True, path_config=str(ROOT / "_config.yml"),
                          confoverrides={"external_toc_path": (ROOT / "_toc.yml").as_posix(),
                                         "latex_individualpages": False, "nitpicky": True, **overrides},
                          builder=builder, doctreedir=doctrees, warningiserror=True, keep_going=True, quiet=True)
    return status if isinstance(status, int) else 1


def english_config():
    """The Sphinx settings Jupyter Book derives from _config.yml."""
    from jupyter_book.config import get_final_config

    config, _ = get_final_config(user_yaml=ROOT / "_config.yml", sourcedir=ROOT,
                                 cli_config={"latex_individualpages": False})
    return config


def figure_alt_texts(chapter):
    """The alt texts of a chapter's figures drawn by code cells (metadata mystnb.image.alt), in order. MyST-NB puts
    them on the images when it writes the page, after Sphinx has read the messages, so Sphinx's gettext builder never
    sees them: extract() adds them to the page's catalogue, and translated_extras.py translates them on the Chinese
    site."""
    import nbformat

    nb = nbformat.read(chapter, as_version=4)
    return [cell.metadata["mystnb"]["image"]["alt"] for cell in nb.cells
            if cell.cell_type == "code" and cell.metadata.get("mystnb", {}).get("image", {}).get("alt")]


def add_notebook_messages(folder=GETTEXT):
    """Each chapter's messages that Sphinx does not see, appended to its page's template
    (_build/gettext/book/NN_name.pot): its figures' alt texts, and the blocks that only its Colab notebooks hold
    (scripts/chinese_notebooks.py)."""
    from babel.messages.pofile import read_po, write_po
    from chinese_notebooks import generated_messages

    for chapter in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb")):
        pot = Path(folder) / "book" / f"{chapter.stem}.pot"
        with open(pot, "rb") as source:
            catalogue = read_po(source)
        for alt in figure_alt_texts(chapter):
            catalogue.add(alt, auto_comments=["alt text of a figure drawn by a code cell"])
        for message in generated_messages(chapter):
            catalogue.add(message, auto_comments=["only in the Colab notebooks (the solved or the student version)"])
        with open(pot, "wb") as out:
            write_po(out, catalogue, width=-1, omit_header=False)


def templates(out=GETTEXT):
    """The English sources' messages: a template (.pot) per page in ``out``. Returns Sphinx's status."""
    out = Path(out)
    status = sphinx("gettext", out, out.parent / f".doctrees-{out.name}", CATALOGUE_SETTINGS)
    if status == 0:
        add_notebook_messages(out)
    return status


def extract():
    """_build/gettext/**/*.pot from the English sources, and the catalogues updated from them."""
    status = templates(GETTEXT)
    if status:
        return status
    return subprocess.run([sys.executable, "-m", "sphinx_intl", "update", "--pot-dir", str(GETTEXT),
                           "--locale-dir", str(LOCALES), "--language", LANGUAGE, "--line-width", "-1"],
                          cwd=ROOT).returncode


def chinese_overrides():
    english = english_config()
    theme = copy.deepcopy(english["html_theme_options"])
    theme["search_bar_text"] = "搜索本书……"
    theme["extra_footer"] = FOOTER
    return {**CATALOGUE_SETTINGS, "language": LANGUAGE, "locale_dirs": [str(LOCALES)], "html_title": TITLE,
            "html_theme_options": theme, "html_search_language": "zh",
            "html_search_options": {"dict": str(write_jieba_dictionary())},
            "html_baseurl": english["html_baseurl"] + LANGUAGE + "/"}


def site(out=SITE):
    """The Chinese site in ``out`` (_build/html/zh_CN, inside the English site, which links each page to it)."""
    out = Path(out)
    return sphinx("html", out, out.parent.parent / f".doctrees-{LANGUAGE}", chinese_overrides())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["extract", "site"])
    parser.add_argument("--out", default=SITE, help="where the Chinese site goes (site; default: %(default)s)")
    args = parser.parse_args(argv)
    return extract() if args.what == "extract" else site(args.out)


if __name__ == "__main__":
    sys.exit(main())
