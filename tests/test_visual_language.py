"""The book's visual language (figures.style, figures.blocks) and the frame of its interactive views
(figures.interactive): one hue per head, K/V heads in their group's hue, hues that stay apart in greyscale, blocks in
proportion to shapes, and views that make no request, stay small and keep stable ids."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402

from attention_book.figures.blocks import draw_block, drawn_size, new_canvas  # noqa: E402
from attention_book.figures.interactive import MAX_BYTES, View  # noqa: E402
from attention_book.figures.style import (HEAD_HUES, apply_book_style, head_cmap, head_colour,  # noqa: E402
                                          kv_head_colour, use_book_style)


def grey(colour):
    r, g, b = to_rgb(colour)
    return 0.299 * r + 0.587 * g + 0.114 * b


def test_a_head_has_one_hue_and_neighbours_differ_in_greyscale():
    assert [head_colour(i) for i in range(12)] == [*HEAD_HUES, *HEAD_HUES[:3]]  # repeats after 9 heads
    for i in range(6):  # the first seven heads: every figure of the book with up to 7 heads reads in greyscale
        assert abs(grey(head_colour(i)) - grey(head_colour(i + 1))) > 0.12, (i, head_colour(i), head_colour(i + 1))
    assert len(set(HEAD_HUES)) == len(HEAD_HUES)


@pytest.mark.parametrize("h, g", [(8, 8), (8, 2), (8, 1), (32, 8)])
def test_a_kv_head_takes_its_groups_hue(h, g):
    for j in range(g):
        assert kv_head_colour(j, h, g) == head_colour(j * (h // g))


@pytest.mark.parametrize("call, message", [
    (lambda: head_colour(-1), "i=-1"),
    (lambda: kv_head_colour(0, 8, 3), "n_kv_heads=3"),
    (lambda: kv_head_colour(2, 8, 2), "j=2"),
])
def test_bad_indices_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_head_maps_run_from_white_to_a_dark_shade_of_the_hue():
    for i in range(len(HEAD_HUES)):
        cmap = head_cmap(i)
        assert cmap(0.0)[:3] == pytest.approx((1.0, 1.0, 1.0))
        assert cmap(0.5)[:3] == pytest.approx(to_rgb(head_colour(i)), abs=0.01)
        assert grey(cmap(1.0)[:3]) < grey(head_colour(i))


def test_the_book_style_applies_inside_a_block_and_globally():
    before = matplotlib.rcParams["axes.spines.top"]
    with use_book_style():
        assert matplotlib.rcParams["axes.spines.top"] is False
    assert matplotlib.rcParams["axes.spines.top"] == before
    with matplotlib.rc_context():
        apply_book_style()
        assert matplotlib.rcParams["axes.spines.top"] is False


def test_blocks_are_drawn_in_proportion_and_scaled_down_past_max_cells():
    assert drawn_size(6, 4) == (4, 6)
    assert drawn_size(4096, 128, max_cells=16) == (16, 16)
    fig, ax = new_canvas(20, 20)
    assert draw_block(ax, 1, 1, 3, 5, head_colour(0), "K (3, 5)", cell=2) == (10, 6)
    plt.close(fig)


def make_view(**changes):
    fig, ax = plt.subplots()
    arguments = dict(name="demo", data={"weights": [0.25, 0.75]}, body='<button class="ab-control">x</button>',
                     script="root.dataset.state = 'start';", style="#{uid} button { color: black; }", fallback=fig,
                     description="A demo view.")
    arguments.update(changes)
    return View(**arguments)


def test_a_view_is_html_with_a_png_fallback_and_a_text_alternative():
    bundle, metadata = make_view()._repr_mimebundle_()
    assert set(bundle) == {"text/html", "image/png", "text/plain"}
    assert 'aria-label="A demo view."' in bundle["text/html"]
    assert metadata["image/png"]["alt"] == "A demo view."


def test_a_views_ids_come_from_its_data():
    first, again, other = make_view(), make_view(), make_view(data={"weights": [0.5, 0.5]})
    assert first.uid == again.uid and first.html() == again.html()
    assert other.uid != first.uid and first.uid.startswith("demo-")
    assert f"#{first.uid} button" in first.html()


@pytest.mark.parametrize("part, text", [
    ("script", "fetch('/data.json')"),
    ("script", "new XMLHttpRequest()"),
    ("body", '<img src="x.png">'),
    ("body", '<a href="https://example.org">x</a>'),
    ("script", "require(['d3'], function () {})"),
    ("style", "@import url(x.css);"),
])
def test_a_view_may_make_no_request(part, text):
    with pytest.raises(ValueError, match="may make no request"):
        make_view(**{part: text})


def test_a_view_stays_small_and_says_what_it_shows():
    with pytest.raises(ValueError, match=f"the limit is {MAX_BYTES:,}"):
        make_view(data={"weights": [0.5] * MAX_BYTES})
    with pytest.raises(ValueError, match="description"):
        make_view(description="")
    with pytest.raises(ValueError, match="kebab-case"):
        make_view(name="Demo View")


def test_variants_and_initialisations_have_fixed_distinct_colours_and_markers():
    from attention_book.figures.style import INIT_COLOURS, VARIANT_COLOURS, VARIANT_LINES, VARIANT_MARKERS

    assert set(VARIANT_COLOURS) == set(VARIANT_MARKERS) == set(VARIANT_LINES) == {"MHA", "GQA", "MQA"}
    assert len(set(VARIANT_MARKERS.values())) == len(set(VARIANT_LINES.values())) == 3
    colours = list(VARIANT_COLOURS.values()) + list(INIT_COLOURS.values())
    assert len(set(colours)) == len(colours)  # a chart of chapters 6 to 10 never gives two meanings one colour
    assert grey(VARIANT_COLOURS["MHA"]) < grey(VARIANT_COLOURS["GQA"]) < grey(VARIANT_COLOURS["MQA"])


def test_text_on_every_hue_reaches_wcag_contrast():
    from attention_book.figures.style import ROLE_COLOURS, contrast_ratio, text_colour_on, tint

    for colour in [*HEAD_HUES, *ROLE_COLOURS.values(), *(tint(h, 0.55) for h in HEAD_HUES)]:
        assert contrast_ratio(text_colour_on(colour), colour) >= 4.5, colour
    assert contrast_ratio("#000000", "#FFFFFF") == pytest.approx(21)


def test_every_figure_a_chapter_stores_has_alt_text():
    """Checked here, in seconds, as well as in the browser: a figure cell carries its alt text in the cell's metadata
    (mystnb.image.alt or mystnb.figure), or each of its images in the output's metadata (interactive views)."""
    import nbformat
    from conftest import chapter_paths

    missing = []
    for path in chapter_paths():
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            images = [o for o in getattr(cell, "outputs", []) if "image/png" in o.get("data", {})]
            mystnb = cell.metadata.get("mystnb", {})
            if images and not ((mystnb.get("image") or {}).get("alt") or mystnb.get("figure")) and not all(
                    o.get("metadata", {}).get("image/png", {}).get("alt") for o in images):
                missing.append(f"{path.name} cell {index}")
    assert not missing, f"figures without alt text: {missing}"
