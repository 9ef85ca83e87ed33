"""The KV-cache calculator (figures/cache_calculator.py): its numbers in Python, and its JavaScript in headless
Chromium, compared exactly with the package's kv_cache_bytes_per_token on every model of the table and on typed
sizes, some past 2**53 bytes (where a JavaScript Number would no longer be exact). The view is opened alone in a
page, every request is routed and refused, and the test fails on any request or console error."""

import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402

from attention_book.experiments.model_configs import MODELS, AttentionConfig  # noqa: E402
from attention_book.figures.cache_calculator import GIB, cache_calculator, cache_table  # noqa: E402
from attention_book.figures.interactive import MAX_BYTES  # noqa: E402
from attention_book.kv_cache import kv_cache_bytes_per_token  # noqa: E402
from attention_book.validation import require_divisible  # noqa: E402
from views import needs_chromium, open_alone  # noqa: E402

KINDS = ("mha", "this", "mqa")


def expected(n_layers, n_heads, n_kv_heads, d_head, context, batch, bytes_per_element, memory_gib):
    """What the view must show, from the package's formula directly: {kind: (bytes, longest context, largest batch)}."""
    memory, out = memory_gib * GIB, {}
    for kind, g in zip(KINDS, (n_heads, n_kv_heads, 1), strict=True):
        per_token = kv_cache_bytes_per_token(n_layers, g, d_head, bytes_per_element)
        out[kind] = (per_token * context * batch, memory // (per_token * batch), memory // (per_token * context))
    return out


def digits(n: int) -> str:
    return f"{n:,}"


# ---------------------------------------------------------------- Python side

def test_cache_table_is_the_package_formula_for_every_model():
    for m in MODELS:
        rows = cache_table(m, context=4096, batch=3, bytes_per_element=2, memory_bytes=80 * GIB)
        want = expected(m.n_layers, m.n_heads, m.n_kv_heads, m.d_head, 4096, 3, 2, 80)
        assert [r["g"] for r in rows] == [m.n_heads, m.n_kv_heads, 1]
        assert {r["kind"]: (r["bytes"], r["max_context"], r["max_batch"]) for r in rows} == want


def test_view_is_small_stable_and_has_a_fallback():
    view = cache_calculator()
    assert len(view.html().encode()) <= MAX_BYTES
    assert view.uid == cache_calculator().uid  # the same data, the same ids: nbval's stored HTML does not change
    assert view.uid != cache_calculator(model="Mistral 7B").uid
    assert view.uid.startswith("kv-cache-calculator-")
    assert view.png.startswith(b"\x89PNG")
    bundle, metadata = view._repr_mimebundle_()
    assert set(bundle) == {"text/html", "image/png", "text/plain"}
    assert metadata["image/png"]["alt"] == view.description
    assert "Llama 3 8B" in view.description and "80 GiB" in view.description
    assert view.html().count('class="ab-control"') == 9  # model, 6 sizes, bytes per number, memory


@pytest.mark.parametrize("model, context, batch, b, memory", [
    ("Gemma 2B", 1, 1, 1, 1), ("PaLM 540B", 2048, 64, 4, 640), ("Falcon 7B", 100_000, 3, 2, 24),
    (AttentionConfig("mine", 2, 64, 4, 2, 16), 10, 2, 4, 1)])
def test_view_draws_for_several_sizes(model, context, batch, b, memory):
    view = cache_calculator(model=model, context=context, batch=batch, bytes_per_element=b, memory_gib=memory)
    assert len(view.html().encode()) <= MAX_BYTES and view.png.startswith(b"\x89PNG")
    if isinstance(model, AttentionConfig):
        assert ">mine</option>" in view.html()  # the reader's own model joins the list


@pytest.mark.parametrize("kwargs, names", [
    ({"model": "Llama 4"}, "model='Llama 4'"), ({"context": 0}, "context=0"), ({"batch": -1}, "batch=-1"),
    ({"bytes_per_element": 3}, "bytes_per_element=3"), ({"memory_gib": 1.5}, "memory_gib=1.5"),
    ({"model": AttentionConfig("odd", 2, 64, 4, 3, 16)}, "n_heads=4 is not divisible by n_kv_heads=3")])
def test_bad_sizes_are_refused_naming_the_parameter(kwargs, names):
    with pytest.raises(ValueError, match=names.replace("(", r"\(")):
        cache_calculator(**kwargs)


# ---------------------------------------------------------------- in the browser

def rows(shown):
    """{kind: (bytes, longest context, largest batch)} as the view shows them, exact (read from its data)."""
    return shown.page.evaluate("""() => Object.fromEntries(['mha', 'this', 'mqa'].map(k => {
        const r = document.querySelector('tr[id$="-row-' + k + '"]');
        return [k, [r.dataset.bytes, r.dataset.maxContext, r.dataset.maxBatch]]; }))""")


def row_text(shown, kind):
    return shown.page.inner_text(f'tr[id$="-row-{kind}"]')



def as_strings(rows):
    return {kind: [str(x) for x in values] for kind, values in rows.items()}


def controls_are_labelled_and_reachable(page):
    """Every .ab-control has a <label for=its id>, and Tab from the top of the page reaches each one in turn."""
    ids = page.eval_on_selector_all(".ab-control", "es => es.map(e => e.id)")
    for id_ in ids:
        assert page.locator(f'label[for="{id_}"]').count() == 1, f"control {id_} has no label"
    reached = []
    for _ in range(len(ids)):
        page.keyboard.press("Tab")
        reached.append(page.evaluate("() => document.activeElement.id"))
    assert reached == ids
    return ids


@needs_chromium
def test_every_model_of_the_table_matches_python(browser):
    with open_alone(browser, cache_calculator(context=8192, batch=32, bytes_per_element=2, memory_gib=80)) as shown:
        first = shown.state()
        assert "Llama 3 8B" in first
        select = shown.page.locator("select[id$=-model]")
        for index, m in enumerate(MODELS):
            select.select_option(str(index))
            want = expected(m.n_layers, m.n_heads, m.n_kv_heads, m.d_head, 8192, 32, 2, 80)
            assert rows(shown) == as_strings(want), m.name
            assert m.name in shown.state() and f"n_kv_heads={m.n_kv_heads}" in shown.state()
            for kind in KINDS:
                shown_text = row_text(shown, kind)
                assert digits(want[kind][0]) + " bytes" in shown_text and digits(want[kind][1]) in shown_text
            assert shown.page.input_value("input[id$=-n_layers]") == str(m.n_layers)


@needs_chromium
@pytest.mark.parametrize("sizes", [
    (1, 1, 1, 1, 1, 1, 1, 1),
    (32, 32, 8, 128, 4096, 1, 2, 80),
    (118, 48, 1, 256, 2048, 512, 4, 640),
    (7, 12, 3, 96, 123_457, 5, 1, 3),
    (1000, 1024, 1024, 256, 1_000_000, 1000, 4, 80),  # 2.1e18 bytes: far past 2**53
    (999_999, 999_999, 333_333, 999_999, 999_999_999, 999_999, 4, 999_999),
])
def test_typed_sizes_match_python_exactly(browser, sizes):
    n_layers, n_heads, n_kv_heads, d_head, context, batch, b, memory = sizes
    want = expected(*sizes)
    with open_alone(browser, cache_calculator()) as shown:
        page = shown.page
        names = ("n_layers", "n_heads", "n_kv_heads", "d_head", "context", "batch")
        for name, value in zip(names, sizes[:6], strict=True):
            page.fill(f"input[id$=-{name}]", str(value))
        page.select_option("select[id$=-bytes_per_element]", str(b))
        page.fill("input[id$=-memory_gib]", str(memory))
        assert rows(shown) == as_strings(want)
        assert page.input_value("select[id$=-model]") in ("", *map(str, range(len(MODELS))))
        if want["mha"][0] > 2**53:
            assert digits(want["mha"][0]) in row_text(shown, "mha")  # every digit, no rounding


@needs_chromium
def test_keyboard_and_mouse_change_what_is_shown(browser):
    with open_alone(browser, cache_calculator(model="Llama 2 7B", context=4096, batch=1)) as shown:
        page = shown.page
        ids = controls_are_labelled_and_reachable(page)
        assert len(ids) == 9
        states = [shown.state()]
        # keyboard: the model list moves to the next model
        page.focus("select[id$=-model]")
        page.keyboard.press("ArrowDown")
        states.append(shown.state())
        assert "Llama 2 13B" in states[-1]
        # keyboard: one more layer; the sizes are no longer any model's
        page.focus("input[id$=-n_layers]")
        page.keyboard.press("ArrowUp")
        states.append(shown.state())
        assert states[-1].startswith("your sizes (n_layers=41,")
        assert page.input_value("select[id$=-model]") == ""
        want = expected(41, 40, 40, 128, 4096, 1, 2, 80)
        assert rows(shown) == as_strings(want)
        # mouse: click the batch field, type a new batch
        page.click("input[id$=-batch]", click_count=3)
        page.keyboard.type("16")
        states.append(shown.state())
        assert rows(shown) == as_strings(expected(41, 40, 40, 128, 4096, 16, 2, 80))
        # back to a model's sizes: the list shows that model again
        page.click("input[id$=-n_layers]", click_count=3)
        page.keyboard.type("40")
        assert page.input_value("select[id$=-model]") == str([m.name for m in MODELS].index("Llama 2 13B"))
        page.select_option("select[id$=-bytes_per_element]", "4")
        states.append(shown.state())
        assert rows(shown) == as_strings(expected(40, 40, 40, 128, 4096, 16, 4, 80))
        assert len(set(states)) == len(states)


@needs_chromium
def test_bad_input_shows_the_packages_own_error(browser):
    with open_alone(browser, cache_calculator()) as shown:
        page = shown.page
        page.fill("input[id$=-n_layers]", "0")
        with pytest.raises(ValueError) as error:
            kv_cache_bytes_per_token(0, 8, 128, 2)
        assert page.inner_text("[id$=-error]") == str(error.value) == "n_layers=0 must be a positive integer"
        assert shown.state() == "error: " + str(error.value)
        assert page.is_hidden("table[id$=-results]")
        page.fill("input[id$=-n_layers]", "32")
        page.fill("input[id$=-n_kv_heads]", "5")
        with pytest.raises(ValueError) as error:
            require_divisible("n_heads", 32, "n_kv_heads", 5)
        assert page.inner_text("[id$=-error]") == str(error.value)
        page.fill("input[id$=-n_kv_heads]", "8")
        assert page.inner_text("[id$=-error]") == "" and page.is_visible("table[id$=-results]")
        assert "Llama 3 8B" in shown.state()
