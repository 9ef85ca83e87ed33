"""Chapter 14's figures: what one token caches (bars to scale) and the absorbed computation (blocks to scale)."""
import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402

from attention_book.figures.latent_attention import (LATENT_COLOUR, cache_rows,  # noqa: E402
                                                     draw_absorbed_attention, draw_cache_per_token)
from attention_book.figures.style import ROLE_COLOURS, tint  # noqa: E402



def test_cache_rows_count_the_numbers_per_token_per_layer():
    rows = cache_rows(128, 128, 8, 512, 64)  # DeepSeek-V2's heads; GQA with 8 K/V heads
    totals = {name: sum(n for _, n, _ in segments) for name, segments in rows}
    assert totals == {"MHA, h = 128": 32_768, "GQA, g = 8": 2_048, "MLA": 576}


@pytest.mark.parametrize("sizes", [dict(), dict(n_heads=4, d_head=8, n_kv_heads=2, kv_lora_rank=16, qk_rope_head_dim=4),
                                   dict(n_heads=1, d_head=2, n_kv_heads=1, kv_lora_rank=1, qk_rope_head_dim=2)])
def test_cache_bars_are_drawn_to_scale(sizes):
    fig = draw_cache_per_token(**sizes)
    top = fig.axes[0]
    bars = [p for p in top.patches if isinstance(p, Rectangle)]
    widths = sorted(round(b.get_width()) for b in bars)
    expected = sorted(n for _, segments in cache_rows(**(dict(n_heads=128, d_head=128, n_kv_heads=8,
                                                               kv_lora_rank=512, qk_rope_head_dim=64) | sizes))
                      for _, n, _ in segments)
    assert widths == expected


def test_every_part_of_a_bar_is_named_and_the_axis_writes_numbers_as_the_labels_do():
    fig = draw_cache_per_token()
    fig.canvas.draw()
    for ax in fig.axes:  # MLA's k^R, too narrow to carry its label inside, is named after the total, zoomed in too
        texts = " ".join(t.get_text() for t in ax.texts)
        assert "c_KV 512" in texts and "k^R 64" in texts
        ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
        assert all("," in t for t in ticks if float(t.replace(",", "")) >= 1000), ticks
    assert "10,000" in [t.get_text() for t in fig.axes[0].get_xticklabels()]


def test_the_latent_has_one_colour_in_both_figures_and_it_is_not_the_weights():
    bars = draw_cache_per_token()
    latent_bar = next(p for p in bars.axes[0].patches if p.get_gid() == "c_KV 512")
    absorbed = draw_absorbed_attention()
    cached = next(p for p in absorbed.axes[0].patches if p.get_gid() == "cached latents")
    assert to_hex(latent_bar.get_facecolor()) == to_hex(cached.get_facecolor()) == to_hex(tint(LATENT_COLOUR, 0.35))
    assert LATENT_COLOUR not in ROLE_COLOURS.values()


@pytest.mark.parametrize("sizes", [dict(), dict(S=20, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
                                                v_head_dim=128), dict(S=1, kv_lora_rank=1, qk_rope_head_dim=2,
                                                                      qk_nope_head_dim=1, v_head_dim=1)])
def test_absorbed_figure_names_every_step(sizes):
    """The absorbed query's label gives its whole width, d_c + d_rope; an arrow brings it to the dot products with
    the cached rows; the scores, the softmax, the weights, head i's mix of latents and W_UV_i are each named; an
    arrow brings the weights down to the mix."""
    fig = draw_absorbed_attention(**sizes)
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    S, d_c, d_r = sizes.get("S", 6), sizes.get("kv_lora_rank", 8), sizes.get("qk_rope_head_dim", 2)
    d_v = sizes.get("v_head_dim", 4)
    for label in (f"absorbed query (1, {d_c}+{d_r})", f"q^R_i (1, {d_r})", f"scores (1, {S})", "softmax",
                  f"weights (1, {S})", f"head i's mix of latents (1, {d_c})", f"W_UV_iᵀ ({d_c}, {d_v})",
                  f"head output (1, {d_v})", "weights × c_KV"):
        assert label in texts, label
    arrows = [p._posA_posB for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len(arrows) == 6  # W_UK, query to the dot products, dot products, softmax, weights to the mix, W_UV
    down = sorted((a for a in arrows if a[1][1] > a[0][1] + 3), key=lambda a: a[0][1])
    assert len(down) == 2  # from the first row to the second (the query's), from the second to the third
    products = next(t for t in ax.texts if t.get_text() == "dot\nproducts")
    assert abs(down[0][1][0] - products.get_position()[0]) < 0.5  # the query's ends at the dot products


def test_absorbed_figure_labels_do_not_overlap():
    fig = draw_absorbed_attention()
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in fig.axes[0].texts]
    for i, (text, box) in enumerate(boxes):
        assert not [other for other, b in boxes[i + 1:] if box.overlaps(b)], text


def test_bad_sizes_are_named():
    with pytest.raises(ValueError, match="n_kv_heads=3"):
        draw_cache_per_token(n_heads=8, n_kv_heads=3)
    with pytest.raises(ValueError, match="kv_lora_rank=0 must be a positive integer"):
        draw_cache_per_token(kv_lora_rank=0)
    with pytest.raises(ValueError, match="S=0 must be a positive integer"):
        draw_absorbed_attention(S=0)
