"""The site builds from the stored outputs with no warnings, and each chapter page has its Colab button, which opens
the notebooks rendered for Colab (colab/ and student/, scripts/colab_button.py), never the chapter's MyST source; every
citation link of those notebooks lands on its entry of the bibliography page."""
import json
import re

import yaml
from conftest import ROOT, chapter_paths


def test_book_builds_without_warnings(built_book):
    assert built_book.returncode == 0, built_book.log[-5000:]
    assert "WARNING" not in built_book.log, built_book.log[-5000:]
    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    slug = repo["url"].removeprefix("https://github.com/")
    for path in chapter_paths():
        page = (built_book.html / "book" / f"{path.stem}.html").read_text()
        colab = f"https://colab.research.google.com/github/{slug}/blob/{repo['branch']}/"
        for folder in ("colab", "student"):
            assert f'href="{colab}{folder}/{path.name}"' in page, f"{path.name}: no Colab link to {folder}/{path.name}"
        assert f"{colab}book/" not in page, f"{path.name}: a Colab link opens the chapter's source, not colab/"


def test_mathjax_is_served_by_the_site(built_book):
    """MathJax comes from _static/mathjax (copied from the pinned package), never from a CDN."""
    mathjax = built_book.html / "_static" / "mathjax"
    assert (mathjax / "tex-chtml.js").is_file()
    assert list((mathjax / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))
    page = (built_book.html / "book" / "01_single_head.html").read_text()
    assert 'src="../_static/mathjax/tex-chtml.js' in page
    assert "cdn.jsdelivr.net" not in page
    size = sum(p.stat().st_size for p in mathjax.rglob("*") if p.is_file())
    assert size < 3 * 2**20, f"the MathJax copy is {size / 2**20:.1f} MiB: copy only what the pages load"


def test_every_citation_in_a_colab_notebook_lands_on_its_bibliography_entry(built_book):
    """scripts/colab.py links each citation to references.html#<id>, the id _config.yml's bibtex_cite_id gives the
    entry; the built page must hold every such id, on an entry of the bibliography."""
    page = (built_book.html / "book" / "references.html").read_text()
    entries = set(re.findall(r'<div class="citation" id="([^"]+)"', page))
    linked = {anchor for folder in ("colab", "student") for path in (ROOT / folder).glob("*.ipynb")
              for anchor in re.findall(r"references\.html#([\w-]+)", path.read_text())}
    assert len(linked) >= 20 and linked <= entries, f"links to no entry of the bibliography: {sorted(linked - entries)}"


def test_each_page_has_its_chinese_edition_and_links_to_it_and_back(built_book):
    """make book builds the Chinese site into the site's zh_CN folder (scripts/translations.py); every page of each
    edition links the same page of the other (scripts/language_switch.py), in its own language."""
    zh = built_book.html / "zh_CN"
    english_pages = sorted(built_book.html.glob("book/*.html"))
    assert english_pages
    for english in english_pages:
        chinese = zh / "book" / english.name
        assert chinese.is_file(), f"no Chinese page for {english.name}"
        assert '<html lang="zh-CN"' in chinese.read_text()
        for page, other in ((english, chinese), (chinese, english)):
            switch = re.search(r'<nav class="language-switch"[^>]*>\s*<a href="([^"]+)"', page.read_text())
            assert switch, f"{page.relative_to(built_book.html)}: no language switch"
            assert (page.parent / switch.group(1)).resolve() == other.resolve(), page.relative_to(built_book.html)


def test_the_chinese_chapters_colab_buttons_open_the_chinese_notebooks(built_book):
    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    colab = f"https://colab.research.google.com/github/{repo['url'].removeprefix('https://github.com/')}/blob/" \
            f"{repo['branch']}/"
    for path in chapter_paths():
        page = (built_book.html / "zh_CN" / "book" / f"{path.stem}.html").read_text()
        for folder in ("colab", "student"):
            assert f'href="{colab}{folder}/zh_CN/{path.name}"' in page, f"{path.name}: {folder}/zh_CN"


def test_the_chinese_search_finds_the_chapter_of_a_term(built_book):
    """Sphinx's Chinese search splits words with jieba, given the edition's terms: 分组查询注意力 and 键值缓存 are
    words of the index, in the titles of the GQA chapter and the KV cache chapter."""
    text = (built_book.html / "zh_CN" / "searchindex.js").read_text(encoding="utf-8")
    index = json.loads(text[text.index("(") + 1:text.rindex(")")])
    for term, chapter in (("分组查询注意力", "book/08_grouped_query"), ("键值缓存", "book/06_kv_cache")):
        found = index["titleterms"].get(term, [])
        found = [found] if isinstance(found, int) else found
        assert chapter in [index["docnames"][i] for i in found], term
