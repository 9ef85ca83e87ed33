"""The Chinese edition (zh_CN): its catalogues translate every English message, in one term per concept, keeping
the markup; they are up to date with the English sources; its notebooks are up to date and hold the English code.

An English edit makes its messages fuzzy (or new, untranslated) in `make translations`, and the first test fails
until they are translated (CONTRIBUTING.md). The Chinese site's build and browser checks are in test_book_build.py
and test_site_in_browser.py, which build and open both editions."""
import json
import re

import nbformat
import pytest
from babel.messages.pofile import read_po
from conftest import ROOT, chapter_paths

from chinese_notebooks import COLAB_ZH, STUDENT_ZH, main as chinese_notebooks_main
from colab import colab_path
from student import student_path
from translation_rules import catalogue_problems, first_use_gaps, glossary_names, problems, term_rules
from translations import CATALOGUES, LANGUAGE, templates, terms

CATALOGUE_PATHS = sorted(CATALOGUES.rglob("*.po"))
HAN = re.compile(r"[\u4e00-\u9fff]")
KEPT_NAMES = {"GQA", "MHA", "MQA", "MLA", "RoPE", "BLEU", "FLOP", "HBM", "SRAM", "GGUF", "SwiGLU", "RMSNorm", "YaRN",
              "d_head", "d_model", "Flash-Decoding", "log-sum-exp", "logit", "softmax"}  # glossary names kept as is


def read(path):
    with open(path, "rb") as source:
        return read_po(source)


def test_there_is_a_catalogue_for_every_page():
    pages = {p.relative_to(ROOT).with_suffix("").as_posix() for p in (ROOT / "book").glob("*.md")}
    pages |= {p.relative_to(ROOT).with_suffix("").as_posix() for p in chapter_paths()}
    assert {p.relative_to(CATALOGUES).with_suffix("").as_posix() for p in CATALOGUE_PATHS} == pages


@pytest.mark.parametrize("path", CATALOGUE_PATHS, ids=lambda p: p.stem)
def test_every_message_is_translated_not_fuzzy_and_keeps_its_markup_and_the_terms(path):
    """No untranslated or fuzzy entry; math, code, citations, cross-references and link addresses kept; glossary
    links to the Chinese glossary's names; the table's term for each term; no ruled-out form; markers that render."""
    found = catalogue_problems(path)
    assert found == [], f"{path.relative_to(ROOT)}: {len(found)} messages: " + "\n".join(
        f"{msgid[:80]!r}: {issues}" for msgid, issues in found[:8])


@pytest.mark.build
def test_the_catalogues_hold_exactly_the_messages_of_the_english_sources(tmp_path):
    """Sphinx's templates of today's English sources against the catalogues: a message added or changed in English
    and not yet brought in with `make translations` fails here."""
    assert templates(tmp_path / "gettext") == 0
    for template in sorted((tmp_path / "gettext").rglob("*.pot")):
        name = template.relative_to(tmp_path / "gettext").with_suffix(".po")
        wanted = {m.id for m in read(template) if m.id}
        held = {m.id for m in read(CATALOGUES / name) if m.id}
        assert not wanted - held, f"{name}: English messages with no entry (run make translations): " \
                                  f"{sorted(wanted - held)[:3]}"
        assert not held - wanted, f"{name}: entries whose English is gone (run make translations): " \
                                  f"{sorted(held - wanted)[:3]}"


def test_a_term_rendered_two_ways_fails_and_the_tables_term_passes():
    names = glossary_names()
    english = "Grouped-query attention keeps a small KV cache."
    assert problems(english, "分组查询注意力只需要很小的键值缓存。", names) == []
    assert any("ruled out" in p for p in problems(english, "分组查询注意力只需要很小的 KV 缓存。", names))
    assert any("ruled out" in p for p in problems(english, "组查询注意力只需要很小的键值缓存。", names))
    assert any("without the table's" in p for p in problems(english, "这种注意力只需要很小的键值缓存。", names))


@pytest.mark.parametrize("english, chinese, expected", [
    ("A head sees $x^2$.", "一个头看到 $x^{2}$。", "math"),
    ("Call `f(x)` here.", "在这里调用 `f (x)`。", "inline code"),
    ("As {cite:t}`shazeer2019fast` showed.", "正如 Shazeer 所示。", "citations"),
    ("See {term}`KV cache`.", "见{term}`KV cache`。", "not a term of the Chinese glossary"),
    ("See {term}`KV cache`.", "见键值缓存。", "glossary links"),
    ("[Open](https://colab.research.google.com/github/o/r/blob/main/student/01_x.ipynb) it.",
     "[打开](https://colab.research.google.com/github/o/r/blob/main/student/01_x.ipynb)。", "link addresses"),
    ("Masks follow one rule.", "Masks follow one rule.", "no Chinese"),
    ("1. Groups of heads", "1. 头的分组", "list or a heading"),
    ("**Time:** about 40 minutes.", "**时间：**约 40 分钟。", "** or *"),
])
def test_each_rule_catches_what_it_is_for(english, chinese, expected):
    assert any(expected in p for p in problems(english, chinese, glossary_names())), problems(
        english, chinese, glossary_names())


def test_a_formula_stays_itself_and_a_name_may_stay_english():
    names = glossary_names()
    formula = r"\text{score}(q, k) = \frac{q \cdot k}{\sqrt{d}}"
    assert problems(formula, formula, names) == []
    assert problems(formula, formula.replace("score", "分数"), names) != []
    assert problems("Flash-Decoding", "Flash-Decoding", names) == []


def test_the_glossary_names_each_term_as_the_table_does():
    """The glossary's Chinese term names are the table's (the other pages' {term} links point at them)."""
    table = {row["english"]: row["chinese"] for row in terms()}
    glossary = {m.id: m.string for m in read(CATALOGUES / "book" / "glossary.po") if m.id}
    wrong = {english: glossary[english] for english in table
             if english in glossary and glossary[english] != (english if english in KEPT_NAMES else table[english])}
    assert wrong == {}


def test_every_term_of_the_table_has_one_chinese_and_its_ruled_out_forms_are_other_words():
    rows = terms()
    chinese_of = {}
    for row in rows:
        assert chinese_of.setdefault(row["english"], row["chinese"]) == row["chinese"], row["english"]
        assert row["chinese"] not in row["avoid"], row
    positive, avoided = term_rules()
    assert positive and avoided


def test_the_chinese_notebooks_are_up_to_date():
    assert chinese_notebooks_main(["--check"]) == 0, "run python scripts/chinese_notebooks.py"


@pytest.mark.parametrize("chapter", chapter_paths(), ids=lambda p: p.name)
def test_a_chinese_notebook_runs_the_english_code_and_shows_chinese_prose(chapter):
    """Code cells, their outputs and metadata are the English notebook's, byte for byte (so nbval passes them exactly
    when it passes the English ones); every Markdown cell with English prose has Chinese in its place."""
    for english_path, chinese_path in ((colab_path(chapter), COLAB_ZH / chapter.name),
                                       (student_path(chapter), STUDENT_ZH / chapter.name)):
        english, chinese = (nbformat.read(p, as_version=4) for p in (english_path, chinese_path))
        assert len(english.cells) == len(chinese.cells), chinese_path.name
        for index, (e, c) in enumerate(zip(english.cells, chinese.cells, strict=True)):
            assert e.cell_type == c.cell_type, (chinese_path.name, index)
            if e.cell_type == "code":
                assert e.source == c.source and e.outputs == c.outputs, (chinese_path.name, index)
                assert e.execution_count == c.execution_count, (chinese_path.name, index)
                strip = lambda meta: json.dumps({k: v for k, v in meta.items() if k != "mystnb"}, sort_keys=True)  # noqa: E731
                assert strip(e.metadata) == strip(c.metadata), (chinese_path.name, index)
            elif re.search(r"[A-Za-z]{3,}\s+[A-Za-z]{3,}\s+[A-Za-z]{3,}", e.source):
                assert HAN.search(c.source), f"{chinese_path.relative_to(ROOT)}, cell {index}: no Chinese"
        assert chinese.metadata["attention_book"]["language"] == LANGUAGE


@pytest.mark.parametrize("path", sorted((CATALOGUES / "book").glob("[0-9][0-9]_*.po")), ids=lambda p: p.stem)
def test_each_chapter_gives_a_terms_english_on_its_first_use(path):
    """分组查询注意力（GQA）, 键值缓存（KV cache）: the English beside the Chinese the first time a chapter uses a
    glossary term (translation_rules.first_use_gaps)."""
    assert first_use_gaps(path) == []
