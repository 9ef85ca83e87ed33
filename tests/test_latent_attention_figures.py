"""Chapter 14's figures: what one token caches (bars to scale) and the absorbed computation (blocks to scale)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from attention_book.figures.latent_attention import (cache_rows, draw_absorbed_attention,  # noqa: E402
                                                     draw_cache_per_token)


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
    plt.close(fig)


@pytest.mark.parametrize("sizes", [dict(), dict(S=20, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
                                                v_head_dim=128), dict(S=1, kv_lora_rank=1, qk_rope_head_dim=2,
                                                                      qk_nope_head_dim=1, v_head_dim=1)])
def test_absorbed_figure_draws_for_several_sizes(sizes):
    fig = draw_absorbed_attention(**sizes)
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    d_c = sizes.get("kv_lora_rank", 8)
    assert f"absorbed query (1, {d_c})" in texts and "head output" in texts
    plt.close(fig)


def test_bad_sizes_are_named():
    with pytest.raises(ValueError, match="n_kv_heads=3"):
        draw_cache_per_token(n_heads=8, n_kv_heads=3)
    with pytest.raises(ValueError, match="kv_lora_rank=0 must be a positive integer"):
        draw_cache_per_token(kv_lora_rank=0)
    with pytest.raises(ValueError, match="S=0 must be a positive integer"):
        draw_absorbed_attention(S=0)
