"""Chapter 15's picture of the ring buffer: it draws what RingKVCache does, on the reader's sizes."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from attention_book.cache_diet import window_mask  # noqa: E402
from attention_book.figures.ring_cache import draw_ring_cache, ring_cache_states  # noqa: E402
from attention_book.figures.style import ROLE_COLOURS, tint  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402


def test_the_states_follow_the_chapters_slot_rule_and_a_chunk_returns_the_old_slots_then_itself():
    states = ring_cache_states(window=8, n_sinks=2, n_tokens=13, chunk=6)
    # sinks in slots 0-1; token p >= 2 in slot 2 + (p - 2) mod 8: after 13 tokens the ring holds tokens 5-12
    assert states["before"] == [0, 1, 10, 11, 12, 5, 6, 7, 8, 9]
    assert states["used"] == 10 and states["next_slot"] == 5
    assert states["returned"] == states["before"] + [13, 14, 15, 16, 17, 18]  # S = used + L = 16
    assert states["after"] == [0, 1, 18, 11, 12, 13, 14, 15, 16, 17]  # token 18 wrapped around into slot 2


def test_the_mask_is_the_window_mask_of_the_returned_keys():
    window, n_sinks, n_tokens, chunk = 5, 1, 9, 4
    states = ring_cache_states(window, n_sinks, n_tokens, chunk)
    full = window_mask(n_tokens + chunk, n_tokens + chunk, window, n_sinks)  # (L, L) over positions
    for r, row in enumerate(states["mask"]):
        query = n_tokens + r
        assert row == [bool(full[query, key]) for key in states["returned"]]


@pytest.mark.parametrize("window, n_sinks, n_tokens, chunk", [(8, 2, 13, 1), (4, 1, 3, 7), (3, 0, 0, 2), (6, 0, 20, 3)])
def test_edge_cases_a_decode_step_a_chunk_longer_than_the_ring_and_an_empty_ring(window, n_sinks, n_tokens, chunk):
    states = ring_cache_states(window, n_sinks, n_tokens, chunk)
    if chunk == 1:  # the filled slots after the write, its own included
        assert states["returned"] == [p for p in states["after"] if p >= 0]
    else:
        assert len(states["returned"]) == states["used"] + chunk
    kept = sorted(p for p in states["after"] if p >= 0)
    last = n_tokens + chunk
    assert kept == sorted(set(range(min(n_sinks, last))) | set(range(max(n_sinks, last - window), last)))


def patches(fig, gid):
    return [p for p in fig.axes[0].patches if p.get_gid() == gid]


def labels(fig, gid):
    return [t.get_text() for t in fig.axes[0].texts if t.get_gid() == gid]


def test_the_picture_has_a_cell_per_slot_and_per_key_with_its_token_written_in_it():
    fig = draw_ring_cache(window=8, n_sinks=2, n_tokens=13, chunk=6)
    assert len(patches(fig, "slot-before")) == len(patches(fig, "slot-after")) == 10
    assert len(patches(fig, "returned")) == 16
    assert len(patches(fig, "mask-cell")) == 6 * 16
    assert labels(fig, "slot-before-label") == ["0", "1", "10", "11", "12", "5", "6", "7", "8", "9"]
    assert labels(fig, "slot-after-label") == ["0", "1", "18", "11", "12", "13", "14", "15", "16", "17"]
    assert [p for p in fig.axes[0].patches if p.get_gid() == "wrap-arrow"]
    text = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "S = used + L = 10 + 6 = 16" in text
    assert "token 18 overwrote token 10, which queries 13-17 still read" in text  # why the old slots come first
    plt.close(fig)


def test_colours_keys_in_the_key_colour_sinks_hatched_the_chunk_in_full():
    fig = draw_ring_cache(window=8, n_sinks=2, n_tokens=13, chunk=6)
    after = patches(fig, "slot-after")
    assert after[0].get_hatch() and after[1].get_hatch() and not after[2].get_hatch()  # the two sinks
    assert to_rgba(after[2].get_facecolor()) == pytest.approx(to_rgba(ROLE_COLOURS["key"]))  # token 18, new
    assert to_rgba(after[3].get_facecolor()) == pytest.approx(to_rgba(tint(ROLE_COLOURS["key"], 0.65)))  # old
    plt.close(fig)


def test_the_figure_grows_with_the_readers_sizes_and_bad_sizes_are_named():
    small, large = draw_ring_cache(4, 1, 6, 2), draw_ring_cache(16, 4, 40, 5, show_mask=False)
    assert len(patches(large, "slot-before")) == 20 and not patches(large, "mask-cell")
    assert large.get_size_inches()[0] > small.get_size_inches()[0]
    plt.close("all")
    for kwargs, match in [(dict(window=0), "window=0"), (dict(chunk=0), "chunk=0"), (dict(n_sinks=-1), "n_sinks=-1"),
                          (dict(n_tokens=2.5), "n_tokens=2.5")]:
        with pytest.raises(ValueError, match=match):
            ring_cache_states(**{"window": 4, "n_sinks": 1, "n_tokens": 3, "chunk": 2, **kwargs})
