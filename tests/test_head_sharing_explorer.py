"""The head-sharing explorer (figures/head_sharing_explorer.py): its numbers in Python, and in headless Chromium its
slider (keyboard and mouse), the groups it draws in the head colours, and its byte counts, compared exactly with
the package's kv_cache_bytes_per_token. The view is opened alone in a page that refuses every request."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from attention_book.experiments.model_configs import MODELS  # noqa: E402
from attention_book.figures.head_sharing_explorer import (  # noqa: E402
    MAX_HEADS, decode_step_numbers, divisors, draw_groups, head_sharing_explorer, scope)
from attention_book.figures.interactive import MAX_BYTES  # noqa: E402
from attention_book.figures.style import head_colour, kv_head_colour  # noqa: E402
from attention_book.kv_cache import kv_cache_bytes_per_token  # noqa: E402
from views import needs_chromium, open_alone  # noqa: E402


def expected(h, g, n_layers, d_head, context, b):
    cache = kv_cache_bytes_per_token(n_layers, g, d_head, b) * context
    return {"cacheBytes": str(cache), "bytesRead": str(cache), "flops": str(4 * h * context * d_head * n_layers)}


# ---------------------------------------------------------------- Python side

def test_divisors():
    assert divisors(32) == [1, 2, 4, 8, 16, 32]
    assert divisors(71) == [1, 71] and divisors(1) == [1]


def test_decode_step_numbers_are_the_package_formula():
    n = decode_step_numbers(32, 8, 32, 128, 4096, 2)
    assert n["cache_bytes"] == n["bytes_read"] == 2 * 32 * 8 * 128 * 2 * 4096 == 512 * 2**20
    assert n["mha_bytes"] == 4 * n["cache_bytes"]
    assert n["flops"] == 4 * 32 * 4096 * 128 * 32
    assert n["flops"] / (2 * 32 * 8 * 128 * 4 * 4096) == 32 / (2 * 8)  # fp32: h / (2g) FLOP per byte, as ch 8 says


@pytest.mark.parametrize("kwargs", [{}, {"n_heads": 8, "n_kv_heads": 2, "n_layers": 2, "d_head": 16, "context": 10},
                                    {"model": "Falcon 7B"}, {"model": "Falcon 40B", "bytes_per_element": 4},
                                    {"n_heads": 1, "n_kv_heads": 1}, {"n_heads": MAX_HEADS, "n_kv_heads": 16}])
def test_view_draws_for_several_sizes_within_the_limit(kwargs):
    view = head_sharing_explorer(**kwargs)
    assert len(view.html().encode()) <= MAX_BYTES
    assert view.png.startswith(b"\x89PNG")
    assert view.uid == head_sharing_explorer(**kwargs).uid  # stable ids for nbval
    assert 'type="range"' in view.html() and 'class="ab-control"' in view.html()


def test_the_view_says_its_numbers_are_the_whole_models():
    config = next(m for m in MODELS if m.name == "Llama 3 8B")
    text = scope(config, 8192, 2)
    assert text.startswith("Llama 3 8B, whole model: 32 layers") and text.endswith("2 bytes per number (fp16)")
    assert text in head_sharing_explorer(model="Llama 3 8B", context=8192).html()


def test_uid_follows_the_data():
    assert head_sharing_explorer().uid != head_sharing_explorer(context=8192).uid


@pytest.mark.parametrize("kwargs, message", [
    ({"n_kv_heads": 5}, "n_heads=32 is not divisible by n_kv_heads=5"),
    ({"n_heads": 0}, "n_heads=0 must be a positive integer"),
    ({"context": -1}, "context=-1 must be a positive integer"),
    ({"bytes_per_element": 0}, "bytes_per_element=0 must be a positive integer"),
    ({"n_heads": 512, "n_kv_heads": 8}, "n_heads=512 is more than the view draws"),
    ({"model": "GPT-5"}, "model='GPT-5' is not in the package's table")])
def test_bad_sizes_are_refused_naming_the_parameter(kwargs, message):
    with pytest.raises(ValueError, match=message):
        head_sharing_explorer(**kwargs)


def test_static_drawing_uses_the_head_colours():
    fig, ax = plt.subplots()
    draw_groups(8, 2, ax)
    faces = [to_hex(p.get_facecolor()).upper() for p in ax.patches]
    assert faces[:8] == [head_colour(i).upper() for i in range(8)]
    assert faces[8:] == [kv_head_colour(j, 8, 2).upper() for j in range(2)]
    plt.close(fig)


# ---------------------------------------------------------------- in the browser



def shown_numbers(page):
    return page.eval_on_selector("dl[id$=-numbers]", "e => ({cacheBytes: e.dataset.cacheBytes, "
                                 "bytesRead: e.dataset.bytesRead, flops: e.dataset.flops})")


def drawn(page):
    """The colours of the query heads and K/V heads drawn, in order, as the view recorded and as the page shows."""
    return page.evaluate("""() => ({
        q: [...document.querySelectorAll('.ab-q')].map(e => e.dataset.colour),
        kv: [...document.querySelectorAll('.ab-kv')].map(e => e.dataset.colour),
        qShown: [...document.querySelectorAll('.ab-q')].map(e => getComputedStyle(e).backgroundColor),
        groups: [...document.querySelectorAll('.ab-group')].map(e => e.querySelectorAll('.ab-q').length)})""")


def rgb(colour):
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


def check_shown(page, state, h, g, n_layers, d_head, context, b):
    assert shown_numbers(page) == expected(h, g, n_layers, d_head, context, b)
    assert state.startswith(f"h={h} g={g} ")
    seen = drawn(page)
    assert seen["q"] == [head_colour(i) for i in range(h)]
    assert seen["qShown"] == [rgb(head_colour(i)) for i in range(h)]
    assert seen["kv"] == [kv_head_colour(j, h, g) for j in range(g)]
    assert seen["groups"] == [h // g] * g
    cache = int(expected(h, g, n_layers, d_head, context, b)["cacheBytes"])
    assert f"{cache:,} bytes" in page.inner_text("dd[id$=-read]")
    assert page.get_attribute("input[type=range]", "aria-valuetext") == page.inner_text("output").strip()


@needs_chromium
def test_slider_by_keyboard_walks_every_divisor(browser):
    with open_alone(browser, head_sharing_explorer(n_heads=32, n_kv_heads=8)) as shown:
        page = shown.page
        slider = page.locator("input[type=range]")
        assert page.locator(f'label[for="{slider.get_attribute("id")}"]').count() == 1
        check_shown(page, shown.state(), 32, 8, 32, 128, 4096, 2)
        assert "536,870,912 bytes = 512.00 MiB at 4,096 tokens, 4 times less than MHA's 2.00 GiB" in \
            page.inner_text("dd[id$=-cache]")
        assert "4.00 FLOP per byte" in page.inner_text("dd[id$=-flops]")  # 2h / (g x 2 bytes)
        page.keyboard.press("Tab")
        assert page.evaluate("() => document.activeElement.type") == "range"
        page.keyboard.press("Home")
        states = []
        for g in divisors(32):
            states.append(shown.state())
            check_shown(page, states[-1], 32, g, 32, 128, 4096, 2)
            assert page.inner_text("output") == f"g = {g} ({'MQA' if g == 1 else 'MHA' if g == 32 else 'GQA'})"
            page.keyboard.press("ArrowRight")
        assert len(set(states)) == len(states)
        page.keyboard.press("End")
        assert "(MHA's)" in page.inner_text("dd[id$=-cache]")


@needs_chromium
@pytest.mark.parametrize("name", ["Falcon 7B", "Falcon 40B", "Gemma 2B", "Qwen2 7B"])
def test_slider_by_mouse_on_models(browser, name):
    m = next(m for m in MODELS if m.name == name)
    with open_alone(browser, head_sharing_explorer(model=name, context=2048, bytes_per_element=4)) as shown:
        page = shown.page
        check_shown(page, shown.state(), m.n_heads, m.n_kv_heads, m.n_layers, m.d_head, 2048, 4)
        box = page.locator("input[type=range]").bounding_box()
        y = box["y"] + box["height"] / 2
        page.mouse.click(box["x"] + 2, y)  # the left end: g = 1
        check_shown(page, shown.state(), m.n_heads, 1, m.n_layers, m.d_head, 2048, 4)
        page.mouse.click(box["x"] + box["width"] - 2, y)  # the right end: g = h
        check_shown(page, shown.state(), m.n_heads, m.n_heads, m.n_layers, m.d_head, 2048, 4)
        gs = divisors(m.n_heads)
        if len(gs) > 2:  # drag to the middle
            page.mouse.move(box["x"] + box["width"] - 2, y)
            page.mouse.down()
            page.mouse.move(box["x"] + box["width"] / 2, y, steps=5)
            page.mouse.up()
            g = gs[int(page.input_value("input[type=range]"))]
            assert 1 < g < m.n_heads
            check_shown(page, shown.state(), m.n_heads, g, m.n_layers, m.d_head, 2048, 4)
