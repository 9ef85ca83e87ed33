"""The attention explorer (figures/attention_explorer.py): its inputs, its inlined data, its fallback, and the view
itself in headless Chromium, opened alone in an output frame as Colab shows it."""
import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attention_book.figures.attention_explorer import (  # noqa: E402
    ALPHABET, attention_explorer, decode_weights, encode_weights, plot_query_weights)
from attention_book.figures.interactive import MAX_BYTES  # noqa: E402
from attention_book.figures.style import head_colour  # noqa: E402
from views import needs_chromium, open_view  # noqa: E402

TOKENS = "[CLS] the cat sat on the mat because it was warm . [SEP]".split()



def random_weights(*shape, seed=0, causal=False):
    scores = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 2
    if causal:
        L = shape[-1]
        scores = scores.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(dim=-1)


def decoded(view, layer):
    """The weights the view inlines for one layer, as (h, L, L)."""
    data = view.data
    n = len(data["tokens"])
    return np.array(decode_weights(data["weights"][layer], data["decimals"])).reshape(-1, n, n)


# ----- the Python side -----

@pytest.mark.parametrize("decimals", [1, 2, 3])
def test_encoding_round_trips_to_the_rounded_weights(decimals):
    values = np.concatenate([[0.0, 1.0, 0.5, 0.0769, 0.0771, 0.87, 0.999], np.random.default_rng(0).random(500)])
    text = encode_weights(values, decimals)
    assert set(text) <= set(ALPHABET)
    assert not set(text) & set("\"'\\<>& ")  # nothing to escape in JSON, HTML or a script element
    np.testing.assert_allclose(decode_weights(text, decimals), np.round(values, decimals), atol=1e-12)
    assert len(text) <= 2 * len(values)


def test_small_weights_take_one_character_each():
    assert len(encode_weights(np.full(100, 0.05), 2)) == 100
    assert len(encode_weights(np.full(100, 0.95), 2)) == 200
    assert len(encode_weights(np.full(100, 0.05), 3)) == 100


@pytest.mark.parametrize("bad, match", [([1.5], r"\[0, 1\]"), ([-0.2], r"\[0, 1\]")])
def test_encoding_rejects_values_outside_0_1(bad, match):
    with pytest.raises(ValueError, match=match):
        encode_weights(bad)
    with pytest.raises(ValueError, match="decimals"):
        encode_weights([0.5], decimals=4)


@pytest.mark.parametrize("shape", [(2, 4, 16, 16), (6, 12, 13, 13), (1, 1, 1, 1), (3, 5, 5)])
def test_views_of_several_shapes_inline_the_rounded_weights(shape):
    weights = random_weights(*shape, seed=1)
    L = shape[-1]
    view = attention_explorer(weights, TOKENS[:L] if L <= len(TOKENS) else [str(i) for i in range(L)])
    layered = len(shape) == 4
    w4 = weights if layered else weights[None]
    assert view.data["layered"] is layered
    assert len(view.data["weights"]) == w4.shape[0]
    for layer in range(w4.shape[0]):
        np.testing.assert_allclose(decoded(view, layer), np.round(w4[layer].numpy(), 2), atol=1e-9)
    assert view.data["colours"] == [head_colour(i) for i in range(w4.shape[1])]
    assert view.data["token"] == L - 1 and view.data["layer"] == 0
    html = view.html()
    assert len(html.encode()) <= MAX_BYTES
    assert ("<select" in html) is layered
    bundle, metadata = view._repr_mimebundle_()
    assert bundle["image/png"] and metadata["image/png"]["alt"] == view.description
    assert f"{L} tokens" in view.description


def test_minilm_sized_view_fits_with_room_to_spare():
    view = attention_explorer(random_weights(6, 12, 13, 13), TOKENS, decimals=2)
    assert len(view.html().encode()) < 0.8 * MAX_BYTES


def test_equal_data_gives_the_same_uid_and_html():
    weights = random_weights(2, 4, 6, 6, seed=3)
    first = attention_explorer(weights, TOKENS[:6], layer=1, token=2)
    again = attention_explorer(weights.clone(), TOKENS[:6], layer=1, token=2)
    assert first.uid == again.uid and first.html() == again.html()
    assert first.uid.startswith("attention-explorer-")
    other = attention_explorer(random_weights(2, 4, 6, 6, seed=4), TOKENS[:6], layer=1, token=2)
    assert other.uid != first.uid
    assert attention_explorer(weights, TOKENS[:6], layer=0, token=2).uid != first.uid


def test_head_names_per_head_or_per_layer():
    weights = random_weights(2, 3, 4, 4)
    view = attention_explorer(weights, TOKENS[:4], head_names=["a", None, "c"])
    assert view.data["names"] == [["a", "", "c"], ["a", "", "c"]]
    view = attention_explorer(weights, TOKENS[:4], head_names=[["previous-token", "", ""], ["", "induction", ""]])
    assert view.data["names"] == [["previous-token", "", ""], ["", "induction", ""]]


@pytest.mark.parametrize("kwargs, match", [
    (dict(weights=torch.ones(4, 4) / 4), r"shape \(n_layers, n_heads, L, S\) or \(n_heads, L, S\)"),
    (dict(weights=torch.ones(1, 2, 3, 4, 4) / 4), r"shape \(n_layers, n_heads, L, S\)"),
    (dict(tokens=TOKENS[:3]), r"L = S = len\(tokens\)"),
    (dict(weights=torch.ones(2, 4, 5) / 5), r"L = S = len\(tokens\)"),
    (dict(weights=torch.full((2, 4, 4), 2.0)), r"in \[0, 1\]"),
    (dict(weights=torch.full((2, 4, 4), float("nan"))), "finite"),
    (dict(head_names=["a"]), "head_names must be 2 names"),
    (dict(head_names=[["a", "b"], ["c", "d"]]), "head_names must be 2 names"),
    (dict(layer=1), r"layer=1 must be in 0 \.\. 0"),
    (dict(token=4), r"token=4 must be in 0 \.\. 3"),
    (dict(decimals=5), "decimals=5 must be one of"),
])
def test_bad_inputs_are_refused_with_a_clear_error(kwargs, match):
    args = dict(weights=torch.ones(2, 4, 4) / 4, tokens=TOKENS[:4])
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        attention_explorer(args.pop("weights"), args.pop("tokens"), **args)


def test_too_big_an_input_is_refused_and_told_how_to_fit():
    with pytest.raises(ValueError, match=r"too much to inline: 6 layer\(s\) x 12 heads x 40 x 40 .* fewer layers"):
        attention_explorer(random_weights(6, 12, 40, 40), [str(i) for i in range(40)])
    attention_explorer(random_weights(1, 12, 40, 40), [str(i) for i in range(40)])  # one layer of it fits


@pytest.mark.parametrize("h, L", [(1, 1), (4, 16), (12, 13), (3, 30)])
def test_fallback_draws_one_strip_per_head_with_the_rounded_weights(h, L):
    weights = random_weights(h, L, L, seed=5)
    tokens = [f"t{i}" for i in range(L)]
    fig = plot_query_weights(weights, tokens, token=L // 2, head_names=["x"] * h)
    assert len(fig.axes) == h
    for head, ax in enumerate(fig.axes):
        heights = [bar.get_height() for bar in ax.patches if bar.get_width() == 0.7]
        np.testing.assert_allclose(heights, np.round(weights[head, L // 2].numpy(), 2))
        assert ax.get_ylabel() == f"head {head}\nx"
    assert [t.get_text() for t in fig.axes[-1].get_xticklabels()] == tokens


@pytest.mark.parametrize("kwargs, match", [
    (dict(strip_height=0), "strip_height=0"), (dict(column_width=-1), "column_width=-1"),
    (dict(weights=torch.ones(2, 1, 3, 3) / 3), r"\(n_heads, L, L\) for one layer"),
    (dict(token=3), r"token=3 must be in 0 \.\. 2"),
])
def test_fallback_rejects_bad_sizes(kwargs, match):
    args = dict(weights=torch.ones(1, 3, 3) / 3, tokens=["a", "b", "c"], token=0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        plot_query_weights(**args)


# ----- in the browser: the view alone in an output frame, as Colab shows it -----

_BARS = """root => [...root.querySelectorAll('.ab-bar')].map(b => parseFloat(b.style.height) / 100)"""
_BESTS = """root => [...root.querySelectorAll('.ab-best')].map(b => b.textContent)"""



def drawn(shown, h, L):
    return np.array(shown.root.evaluate(_BARS)).reshape(h, L)


@needs_chromium
@pytest.mark.parametrize("decimals", [2, 3])
def test_hover_focus_keys_and_layer_change_what_is_drawn(browser, decimals):
    weights = random_weights(2, 4, 13, 13, seed=7, causal=True)
    rounded = np.round(weights.numpy(), decimals)
    view = attention_explorer(weights, TOKENS, head_names=[["prev", "", "", ""], ["", "induction", "", ""]],
                              layer=1, token=12, decimals=decimals)
    with open_view(browser, view) as shown:
        assert shown.state() == "layer 1, token 12 '[SEP]'"
        np.testing.assert_allclose(drawn(shown, 4, 13), rounded[1, :, 12], atol=1e-9)
        bests = shown.root.evaluate(_BESTS)
        for head in range(4):
            best = int(rounded[1, head, 12].argmax())
            assert bests[head] == f"→ '{TOKENS[best]}' {rounded[1, head, 12, best]:.{decimals}f}"
        assert "head 1 (induction)" in shown.root.inner_text()

        tokens = shown.root.locator(".ab-token")
        assert tokens.count() == 13
        tokens.nth(2).hover()  # hovering makes a token the query
        assert shown.state() == "layer 1, token 2 'cat'"
        np.testing.assert_allclose(drawn(shown, 4, 13), rounded[1, :, 2], atol=1e-9)
        assert np.all(drawn(shown, 4, 13)[:, 3:] == 0)  # causal: nothing on later tokens

        before = tokens.nth(2).bounding_box()
        shown.root.locator("select").select_option("0")  # the layer selector
        assert shown.state() == "layer 0, token 2 'cat'"
        assert tokens.nth(2).bounding_box() == before  # other head names: the tokens stay under the mouse
        np.testing.assert_allclose(drawn(shown, 4, 13), rounded[0, :, 2], atol=1e-9)
        assert "head 0 (prev)" in shown.root.inner_text()

        # keyboard only: Tab reaches the selector, then the chosen token; the arrow keys move along the row
        shown.page.mouse.move(0, 0)
        shown.frame.evaluate("() => document.activeElement.blur()")
        shown.page.keyboard.press("Tab")
        assert shown.focused()[0] == "ab-control"
        shown.page.keyboard.press("Tab")
        assert shown.focused() == ["ab-control ab-token", "cat"]
        for key, want in [("ArrowRight", 3), ("ArrowRight", 4), ("ArrowLeft", 3), ("End", 12), ("ArrowRight", 12),
                          ("Home", 0), ("ArrowLeft", 0)]:
            shown.page.keyboard.press(key)
            assert shown.state() == f"layer 0, token {want} '{TOKENS[want]}'", key
            np.testing.assert_allclose(drawn(shown, 4, 13), rounded[0, :, want], atol=1e-9)
        shown.page.keyboard.press("ArrowDown")
        shown.page.keyboard.press("ArrowDown")
        assert shown.state() == "layer 0, token 2 'cat'"
        # the screen-reader summary follows the query
        live = shown.root.locator("[aria-live]").inner_text()
        assert "layer 0, token 2 'cat'" in live
        assert shown.root.get_attribute("role") == "figure" and "13 tokens" in shown.root.get_attribute("aria-label")
        pressed = shown.root.locator(".ab-token[aria-pressed=true]")
        assert pressed.count() == 1 and pressed.inner_text() == "cat"
        assert shown.root.locator("label").inner_text().strip() == "Layer"


@needs_chromium
def test_a_view_without_layers_has_no_selector(browser):
    weights = random_weights(3, 5, 5, seed=2)
    view = attention_explorer(weights, TOKENS[:5], token=0)
    with open_view(browser, view) as shown:
        assert shown.state() == "token 0 '[CLS]'"
        assert shown.root.locator("select").count() == 0
        shown.root.locator(".ab-token").nth(4).focus()
        assert shown.state() == "token 4 'on'"
        np.testing.assert_allclose(drawn(shown, 3, 5), np.round(weights[:, 4].numpy(), 2), atol=1e-9)
        controls = shown.root.locator(".ab-control")
        assert controls.count() == 5


@needs_chromium
def test_two_views_in_one_frame_keep_to_themselves(browser):
    first = attention_explorer(random_weights(2, 2, 4, 4, seed=1), TOKENS[:4])
    second = attention_explorer(random_weights(2, 2, 4, 4, seed=2), TOKENS[:4])
    with open_view(browser, first.html() + second.html()) as shown:
        views = shown.frame.locator(".ab-view")
        assert views.count() == 2
        views.nth(0).locator(".ab-token").nth(1).hover()
        views.nth(1).locator("select").select_option("1")
        assert views.nth(0).evaluate("r => r.dataset.state") == "layer 0, token 1 'the'"
        assert views.nth(1).evaluate("r => r.dataset.state") == "layer 1, token 3 'sat'"
