"""What a translated message must keep of its English, and the edition's terms: the rules that
tests/test_translations.py applies to every message of locales/zh_CN, and that a translator runs on a draft.

    python scripts/translation_rules.py locales/zh_CN/LC_MESSAGES/book/03_multi_head.po   # its problems, if any

A translation keeps, exactly: every math span ($...$, $$...$$), every inline code span, every citation, {doc},
{ref} and {numref} target, every link's address (the Colab links go to the Chinese notebooks: /student/zh_CN/ and
/colab/zh_CN/), and as many glossary links ({term}) as the English, each to the glossary's Chinese name of a term.
It uses the table's Chinese for the table's terms (locales/zh_CN/terms.md: "one term per concept") and none of the
forms the table rules out.
"""
import re
import sys
from collections import Counter
from pathlib import Path

from colab import _explicit, glossary_entries
from translations import CATALOGUES, terms

MATH = re.compile(r"\$\$.+?\$\$|\$[^$\n]+?\$", re.S)
CODE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
ROLE = re.compile(r"\{(?P<name>[a-z][\w:+-]*)\}`(?P<content>[^`]+)`")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\((?P<target><[^>]*>|[^)\s]+)\)")
KEPT_ROLES = {"cite", "cite:p", "cite:t", "cite:ps", "cite:ts", "doc", "ref", "numref", "eq"}
HAN = re.compile(r"[\u4e00-\u9fff]")
COLAB_FOLDERS = re.compile(r"/(student|colab)/(?=\d\d_)")


def _block_kind(markdown):
    """The first block token MyST's parser makes of a message (a message must be one paragraph)."""
    from markdown_messages import _parser

    tokens = _parser().parse(markdown)
    return tokens[0].type if tokens else "paragraph_open"


def _rendered_text(markdown):
    """The text a message shows once rendered (MyST's parser), code and math left out."""
    from markdown_messages import _parser

    tokens = _parser().parseInline(markdown)
    return "".join(child.content for token in tokens for child in (token.children or [])
                   if child.type == "text")


def role_target(content):
    """What a role points at: the target of "text <target>", else the content (scripts/colab.py's reading)."""
    return _explicit(content)[1]


def role_text(content):
    """What a role shows: the text of "text <target>", else the content."""
    text, target = _explicit(content)
    return text or target


def without_markup(text):
    """The prose of a message: math, code, citations, roles' targets and link addresses taken out."""
    text = MATH.sub(" ", text)
    text = CODE.sub(" ", text)
    text = ROLE.sub(lambda m: " " if m["name"].startswith("cite") else f" {role_text(m['content'])} ", text)
    return re.sub(r"\]\([^)]*\)", "] ", text)


def chinese_link(target):
    """The address a Chinese message gives where the English links to ``target``."""
    if target.startswith("https://colab.research.google.com/"):
        return COLAB_FOLDERS.sub(lambda m: f"/{m[1]}/zh_CN/", target)
    return target


def glossary_names(catalogue_folder=CATALOGUES):
    """The Chinese glossary's terms (what a translated {term} may point at): the translations of glossary.po's
    term messages, read from the glossary's English source."""
    from babel.messages.pofile import read_po

    names = set(glossary_entries())
    with open(catalogue_folder / "book" / "glossary.po", "rb") as source:
        catalogue = read_po(source)
    return {(catalogue.get(name).string or name) if catalogue.get(name) else name for name in names}


def term_rules():
    """[(english pattern, chinese, allowed forms)] for the terms whose English must show as the table's Chinese
    (terms of two words or more, or hyphenated, and the single words that have no other sense in the book's prose),
    and {form ruled out: (its term, the forms that are right)}."""
    distinctive = {"perplexity", "prefill", "uptraining", "quantisation", "roofline", "softmax", "self-attention",
                   "cross-attention", "ablation", "nats"}
    positive, avoided = [], {}
    for row in terms():
        english = row["english"]
        if english != row["chinese"] and (re.search(r"[ \-/]", english) or english.lower() in distinctive):
            pattern = re.compile(r"(?<![\w-])" + re.escape(english).replace(r"\ ", r"[ -]") + r"(?:s|es)?(?![\w-])",
                                 re.I)
            positive.append((pattern, row["chinese"], row["allowed"]))
        for form in row["avoid"]:
            avoided[form] = (english, [row["chinese"], *row["allowed"]])
    return positive, avoided


def is_formula(msgid):
    """Whether a message is a display formula (the body of a $$...$$ block, which Sphinx extracts without its $$):
    LaTeX, with no prose around it once its \\text{...} labels are set aside."""
    if "$" in msgid or "`" in msgid or not re.search(r"\\[A-Za-z]+|[_^]\{", msgid):
        return False
    rest = re.sub(r"\\(?:text|mathrm|operatorname|mathbf|mathit)\{[^{}]*\}", " ", msgid)
    rest = re.sub(r"\\[A-Za-z]+", " ", rest)
    return re.search(r"[A-Za-z]{3,}\s+[A-Za-z]{3,}", rest) is None


def problems(msgid, msgstr, names, rules=None):
    """What is wrong with ``msgstr`` as the translation of ``msgid``: a list of sentences (empty: nothing)."""
    positive, avoided = rules or term_rules()
    found = []
    if not msgstr.strip():
        return ["not translated"]
    if is_formula(msgid):  # formulas are not translated
        return [] if msgstr == msgid else ["a formula: its translation must be the formula itself, byte for byte"]
    for what, pattern in (("math", MATH), ("inline code", CODE)):
        def spans(text):
            return Counter(m.group(0) for m in pattern.finditer(ROLE.sub(" ", text)))

        if spans(msgid) != spans(msgstr):
            found.append(f"its {what} differs from the English's (keep every span exactly)")
    english_roles = [(m["name"], role_target(m["content"])) for m in ROLE.finditer(msgid)]
    chinese_roles = [(m["name"], role_target(m["content"])) for m in ROLE.finditer(msgstr)]
    kept = lambda roles: Counter(role for role in roles if role[0] in KEPT_ROLES)  # noqa: E731
    if kept(english_roles) != kept(chinese_roles):
        found.append("its citations or cross-references differ from the English's (keep each role and target)")
    english_terms = [t for name, t in english_roles if name == "term"]
    chinese_terms = [t for name, t in chinese_roles if name == "term"]
    if len(english_terms) != len(chinese_terms):
        found.append(f"it has {len(chinese_terms)} glossary links where the English has {len(english_terms)}")
    for target in chinese_terms:
        if target not in names:
            found.append(f"{{term}} points at {target!r}, which is not a term of the Chinese glossary")
    if Counter(chinese_link(m["target"]) for m in LINK.finditer(msgid)) != Counter(
            m["target"] for m in LINK.finditer(msgstr)):
        found.append("its link addresses differ from the English's (Colab links: /student/zh_CN/, /colab/zh_CN/)")
    prose_english, prose_chinese = without_markup(msgid), without_markup(msgstr)
    if HAN.search(prose_chinese) is None and re.search(r"[A-Za-z]{3,}\s+[A-Za-z]{3,}", prose_english):
        found.append("it holds no Chinese")  # English prose of two words or more; a name alone may stay
    if _block_kind(msgstr) != "paragraph_open":
        found.append("it reads as a list or a heading, not as a sentence, so Sphinx drops it: escape its start "
                     "(\"1\\. 标题\" for \"1. Title\")")
    if "*" in msgstr and _rendered_text(msgstr).count("*") > _rendered_text(msgid).count("*"):
        found.append("a ** or * shows as is: in Chinese text, keep punctuation outside the markers, or put a space "
                     "before an opening ** that follows a character")
    for pattern, chinese, allowed in positive:
        if pattern.search(prose_english) and not any(form in msgstr for form in [chinese, *allowed]):
            found.append(f"{pattern.pattern!r} is translated without the table's {chinese!r}")
    for form, (english, right) in avoided.items():
        rest = msgstr
        for name in sorted(right, key=len, reverse=True):  # 组查询注意力 is ruled out, 分组查询注意力 is right
            rest = rest.replace(name, " ")
        if form in rest:
            found.append(f"{form!r} is ruled out for {english!r}: use the table's term")
    return found


def catalogue_problems(path, names=None):
    """[(msgid, [problems])] of one catalogue; fuzzy entries count as not translated."""
    from babel.messages.pofile import read_po

    names = glossary_names() if names is None else names
    rules = term_rules()
    with open(path, "rb") as source:
        catalogue = read_po(source)
    found = []
    for message in catalogue:
        if not message.id:
            continue
        issues = ["fuzzy: the English changed since it was translated"] if message.fuzzy else []
        issues += problems(message.id, message.string or "", names, rules)
        if issues:
            found.append((message.id, issues))
    return found


if __name__ == "__main__":
    total = 0
    for argument in sys.argv[1:]:
        for msgid, issues in catalogue_problems(Path(argument)):
            total += 1
            print(f"{argument}: {msgid[:100]!r}\n  " + "\n  ".join(issues))
    print(f"{total} messages with problems")
    sys.exit(1 if total else 0)


def first_use_gaps(path):
    """The glossary terms (of three characters or more: shorter ones are also ordinary words and parts of other
    terms) whose first use in a chapter's catalogue (in page order; the Colab-only blocks and alt texts
    left out) does not give the English beside the Chinese: [Chinese term]. The edition's rule: 分组查询注意力（GQA）,
    键值缓存（KV cache）, the first time in each chapter."""
    from babel.messages.pofile import read_po

    english_terms = set(glossary_entries())
    rows = [row for row in terms() if row["english"] in english_terms and len(HAN.findall(row["chinese"])) >= 3]
    with open(path, "rb") as source:
        messages = [m.string for m in read_po(source) if m.id and m.string and not any(
            "Colab notebooks" in comment or "alt text" in comment for comment in m.auto_comments)]
    longer = sorted({row["chinese"] for row in terms()}, key=len, reverse=True)

    def shown(text, term):
        """The text as a reader sees it (a role's target left out), with the longer terms that hold ``term``
        (位置编码 in 旋转位置编码) and the words that only look like it (来自注意力) taken out."""
        text = ROLE.sub(lambda m: role_text(m["content"]), text)
        for other in longer:
            if term in other and other != term:
                text = text.replace(other, " ")
        return text.replace("来自注意力", " ")

    gaps = []
    for row in rows:
        first = next((text for text in messages if row["chinese"] in shown(text, row["chinese"])), None)
        if first is not None and not any(form.lower() in first.lower() for form in [row["english"], *row["allowed"]]):
            gaps.append(row["chinese"])
    return gaps
