"""The diagrams of chapters 6 to 10 (the KV cache over decode steps, the GQA fold, the roofline, mean pooling of K/V
heads): they draw for several sizes, reject bad sizes by name, and what they print (bytes, rows, bounds) matches the
tensors and formulas they stand for."""
import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402
import torch  # noqa: E402

from attention_book.figures.gqa_fold import draw_gqa_fold, fold_bytes, format_bytes  # noqa: E402
from attention_book.figures.kv_cache_steps import cache_step_rows, draw_kv_cache_steps  # noqa: E402
from attention_book.figures.kv_pooling import draw_kv_pooling  # noqa: E402
from attention_book.figures.roofline import attainable_flop_rate, draw_roofline, ridge_point  # noqa: E402
from attention_book.figures.style import head_colour, kv_head_colour  # noqa: E402
from attention_book.kv_cache import KVCache  # noqa: E402



def texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def patches(fig, gid):
    return [p for ax in fig.axes for p in ax.patches if p.get_gid() == gid]


def facecolours(fig):
    return {matplotlib.colors.to_hex(p.get_facecolor()) for ax in fig.axes for p in ax.patches if p.get_fill()}


# --- the KV cache over decode steps -------------------------------------------------------------------------------

@pytest.mark.parametrize("prompt_len", [0, 5])
def test_cache_step_rows_match_a_real_cache(prompt_len):
    cache = KVCache(batch_size=1, n_kv_heads=1, d_head=4, max_len=16)
    if prompt_len:
        cache.append(torch.randn(1, 1, prompt_len, 4), torch.randn(1, 1, prompt_len, 4))
    for t in range(1, 5):
        before = cache.length
        k, _ = cache.append(torch.randn(1, 1, 1, 4), torch.randn(1, 1, 1, 4))
        rows = cache_step_rows(t, prompt_len)
        assert rows == {"new": cache.length - before, "cached_before": before, "read": k.shape[2]}


@pytest.mark.parametrize("kwargs", [{}, {"n_steps": 1}, {"n_steps": 6, "d_head": 64, "prompt_len": 10},
                                    {"n_steps": 3, "d_head": 2, "max_cells": 3}])
def test_kv_cache_steps_draws_one_panel_per_step_with_one_new_row_each(kwargs):
    fig = draw_kv_cache_steps(**kwargs)
    n_steps, d_head, prompt = kwargs.get("n_steps", 4), kwargs.get("d_head", 4), kwargs.get("prompt_len", 0)
    labels = texts(fig)
    assert [f"step t = {t}" in labels for t in range(1, n_steps + 1)] == [True] * n_steps
    assert f"K ({prompt + n_steps}, {d_head})" in labels and f"V ({prompt + 1}, {d_head})" in labels
    assert len(patches(fig, "new-key")) == len(patches(fig, "new-value")) == n_steps


@pytest.mark.parametrize("kwargs, name", [({"n_steps": 0}, "n_steps"), ({"d_head": -1}, "d_head"),
                                          ({"prompt_len": -2}, "prompt_len"), ({"max_cells": 1.5}, "max_cells")])
def test_kv_cache_steps_rejects_bad_sizes_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name):
        draw_kv_cache_steps(**kwargs)


# --- GQA's fold ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("B, h, g, S, d, dtype", [(1, 8, 2, 16, 4, torch.float32), (2, 32, 8, 64, 16, torch.float16),
                                                 (1, 4, 4, 8, 8, torch.float32), (3, 6, 1, 5, 2, torch.bfloat16)])
def test_fold_bytes_are_the_tensors_bytes(B, h, g, S, d, dtype):
    k, v = torch.randn(B, g, S, d).to(dtype), torch.randn(B, g, S, d).to(dtype)
    copies = [t.repeat_interleave(h // g, dim=1) for t in (k, v)]  # what repeat_kv writes
    counted = fold_bytes(B, h, g, S, d, bytes_per_element=k.element_size())
    assert counted["repeat_kv"]["written"] == sum(c.nbytes for c in copies)
    assert counted["repeat_kv"]["read"] == k.nbytes + v.nbytes + sum(c.nbytes for c in copies)
    assert counted["fold"] == {"written": 0, "read": k.nbytes + v.nbytes}


def test_format_bytes():
    assert [format_bytes(n) for n in (384, 2048, 3 * 2**19, 2**31)] == ["384 B", "2 KiB", "1.5 MiB", "2 GiB"]


@pytest.mark.parametrize("kwargs", [{}, {"n_heads": 32, "n_kv_heads": 8, "seq_len": 1}, {"n_heads": 4, "n_kv_heads": 1},
                                    {"n_heads": 8, "n_kv_heads": 4, "kv_len": 5, "d_head": 3, "max_groups": 4}])
def test_fold_draws_copies_and_prints_the_bytes(kwargs):
    h, g = kwargs.get("n_heads", 8), kwargs.get("n_kv_heads", 2)
    shown = min(g, kwargs.get("max_groups", 1))
    fig = draw_gqa_fold(**kwargs)
    assert len(patches(fig, "copy")) == shown * (h // g)
    counted = fold_bytes(1, h, g, kwargs.get("kv_len", 4096), kwargs.get("d_head", 128))
    joined = "\n".join(texts(fig))
    assert f"writes {format_bytes(counted['repeat_kv']['written'])} of copies" in joined
    assert f"reads {format_bytes(counted['repeat_kv']['read'])}" in joined
    assert f"writes nothing, reads {format_bytes(counted['fold']['read'])}" in joined
    colours = facecolours(fig)
    assert {head_colour(i).lower() for i in range(shown * (h // g))} <= colours  # each query head in its colour


@pytest.mark.parametrize("kwargs, name", [({"n_kv_heads": 3}, "n_heads"), ({"seq_len": 0}, "seq_len"),
                                          ({"kv_len": 2.5}, "kv_len"), ({"bytes_per_element": 0}, "bytes_per_element")])
def test_fold_rejects_bad_sizes_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name):
        draw_gqa_fold(**kwargs)
    if name in ("n_heads", "bytes_per_element"):
        with pytest.raises(ValueError, match=name):
            fold_bytes(1, 8, kwargs.get("n_kv_heads", 2), 16, 4, kwargs.get("bytes_per_element", 4))


# --- the roofline -------------------------------------------------------------------------------------------------

def test_roofline_bound_is_the_lower_ceiling():
    assert ridge_point(20e9, 100e9) == pytest.approx(5.0)
    assert attainable_flop_rate(0.5, 20e9, 100e9) == pytest.approx(10e9)  # memory-bound: intensity x bandwidth
    assert attainable_flop_rate(5.0, 20e9, 100e9) == pytest.approx(100e9)  # at the ridge point both agree
    assert attainable_flop_rate(16, 20e9, 100e9) == pytest.approx(100e9)  # compute-bound


@pytest.mark.parametrize("bandwidth, flop_rate, n_points", [(23e9, 100e9, 4), (200e9, 50e9, 1), (5e9, 1e12, 2)])
def test_roofline_draws_both_ceilings_and_every_point(bandwidth, flop_rate, n_points):
    points = [(f"g = {2 ** i}", 0.5 * 2**i, 1e9 * (i + 1)) for i in range(n_points)]
    fig = draw_roofline(bandwidth, flop_rate, points, title="test")
    ax = fig.axes[0]
    assert len([line for line in ax.lines if line.get_gid() == "measured"]) == n_points
    assert ax.get_xscale() == ax.get_yscale() == "log"
    labels = texts(fig)
    assert all(label in labels for label, _, _ in points)
    assert f"ridge point\n{flop_rate / bandwidth:.1f} FLOP/byte" in labels
    slope, ceiling = ax.lines[0], ax.lines[1]
    assert slope.get_ydata()[-1] == ceiling.get_ydata()[0] == pytest.approx(flop_rate / 1e9)  # they meet at the ridge


@pytest.mark.parametrize("args, name", [((0, 1e9, [("a", 1, 1)]), "bandwidth"), ((1e9, -1, [("a", 1, 1)]), "flop_rate"),
                                        ((1e9, 1e9, []), "points"), ((1e9, 1e9, [("a", 0, 1)]), "intensity")])
def test_roofline_rejects_bad_input_by_name(args, name):
    with pytest.raises(ValueError, match=name):
        draw_roofline(*args)


# --- mean pooling ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("h, g, d_model, d_head", [(8, 2, 6, 2), (4, 4, 3, 1), (12, 3, 64, 16), (8, 1, 4, 2)])
def test_kv_pooling_draws_each_head_and_one_block_per_group(h, g, d_model, d_head):
    fig = draw_kv_pooling(n_heads=h, n_kv_heads=g, d_model=d_model, d_head=d_head)
    labels = texts(fig)
    for name in "KV":
        assert all(f"{name}{i}" in labels for i in range(h))
        assert all(f"new {name}{j}" in labels for j in range(g))
    assert len(patches(fig, "pooled")) == 2 * g
    colours = facecolours(fig)
    assert {head_colour(i).lower() for i in range(h)} <= colours


@pytest.mark.parametrize("kwargs, name", [({"n_kv_heads": 3}, "n_heads"), ({"d_model": 0}, "d_model"),
                                          ({"d_head": None}, "d_head")])
def test_kv_pooling_rejects_bad_sizes_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name):
        draw_kv_pooling(**kwargs)


def test_group_hue_is_the_first_heads():
    assert kv_head_colour(1, 8, 2) == head_colour(4)
