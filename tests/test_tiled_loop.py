"""Chapter 13's picture of the tiled loop: one step, blocks to scale, in the book's role colours; what it says it
reads and holds is counted by tile_step, which agrees with the loop of tiled_attention; bad steps named."""
import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402

from attention_book.figures.style import ROLE_COLOURS, tint  # noqa: E402
from attention_book.figures.tiled_loop import DONE, LATER, draw_tiled_loop, tile_step  # noqa: E402



def patches(fig, gid):
    return [p for p in fig.axes[0].patches if p.get_gid() == gid]


def texts(fig):
    return " | ".join(t.get_text() for t in fig.axes[0].texts)


def test_tile_step_counts_what_one_step_reads_and_holds():
    step = tile_step(12, 16, 4, 4, 4, query_block=1, key_block=2)
    assert step["queries"] == (4, 8) and step["keys"] == (8, 12)
    assert step["n_query_blocks"] == 3 and step["n_key_blocks"] == 4
    assert step["read"] == 2 * 4 * 4  # a key block and a value block
    assert step["on_chip"] == 16 + 32 + 16 + 8 + 16  # queries, K and V blocks, the tile, m and ℓ, acc
    assert step["read_per_query_block"] == 16 + 2 * 16 * 4 and step["written_per_query_block"] == 16
    assert step["scores"] == 192


def test_the_last_blocks_may_be_shorter():
    step = tile_step(13, 29, 5, 7, 16, query_block=2, key_block=4)
    assert step["queries"] == (10, 13) and step["keys"] == (28, 29)
    assert step["n_query_blocks"] == 3 and step["n_key_blocks"] == 5
    assert step["read"] == 2 * 1 * 16


@pytest.mark.parametrize("L, S, block_q, block_k", [(12, 16, 4, 4), (13, 29, 5, 7), (1, 3, 1, 5)])
def test_every_query_block_reads_every_key_and_value_once(L, S, block_q, block_k):
    """Summed over the inner loop's steps, a query block reads K and V once each: FlashAttention-2's loop order."""
    d = 3
    first = tile_step(L, S, block_q, block_k, d)
    for i in range(first["n_query_blocks"]):
        steps = [tile_step(L, S, block_q, block_k, d, i, j) for j in range(first["n_key_blocks"])]
        assert sum(s["read"] for s in steps) == 2 * S * d
        assert [s["keys"][0] for s in steps] == list(range(0, S, block_k))
        assert steps[0]["read_per_query_block"] == (steps[0]["queries"][1] - steps[0]["queries"][0]) * d + 2 * S * d


@pytest.mark.parametrize("sizes", [
    dict(), dict(L=13, S=29, block_q=5, block_k=7, d_head=16, query_block=2, key_block=4),
    dict(L=1, S=3, block_q=1, block_k=5, d_head=1, query_block=0, key_block=0),
    dict(L=4096, S=4096, block_q=128, block_k=128, d_head=64, query_block=3, key_block=20)])
def test_the_step_is_drawn_with_its_blocks_done_now_and_to_come(sizes):
    fig = draw_tiled_loop(**sizes)
    args = dict(L=12, S=16, block_q=4, block_k=4, d_head=4, query_block=1, key_block=2) | sizes
    step = tile_step(**args)
    i, j = args["query_block"], args["key_block"]
    for name, now, n in (("q", i, step["n_query_blocks"]), ("k", j, step["n_key_blocks"]),
                         ("v", j, step["n_key_blocks"])):
        assert len(patches(fig, f"{name}-now")) == 1
        assert len(patches(fig, f"{name}-done")) == now
        assert len(patches(fig, f"{name}-later")) == n - now - 1
    for name, role in (("q", "query"), ("k", "key"), ("v", "value")):
        assert patches(fig, f"{name}-now")[0].get_facecolor()[:3] == pytest.approx(to_rgb(ROLE_COLOURS[role]))
    assert len(patches(fig, "read")) == 2  # this step's key block and value block, into the chip
    assert len(patches(fig, "tile")) == 1 and len(patches(fig, "scores")) == 1
    assert len(patches(fig, "chip")) == 1 and len(patches(fig, "memory")) == 1
    labels = texts(fig)
    L, S, d = args["L"], args["S"], args["d_head"]
    assert f"Q ({L}, {d})" in labels and f"O ({L}, {d})" in labels and f"(L, S) = ({L}, {S}) scores" in labels
    assert f"reads {step['read']:,} numbers" in labels and f"holds {step['on_chip']:,}" in labels
    assert "e^{m-m'}" in labels  # the rescaling of ℓ and acc
    assert r"\sqrt{d_\mathrm{head}}" in labels  # the tile's scores are scaled as tiled_attention scales them
    steps = [labels.find(f"{n}. ") for n in range(1, 5)]
    assert -1 < steps[0] < steps[1] < steps[2] < steps[3]  # the four steps in one block, in reading order
    # the output's rows: earlier query blocks done (written), this one's in full colour, later ones to come
    assert len(patches(fig, "o-done")) == i and len(patches(fig, "o-now")) == 1
    assert len(patches(fig, "o-later")) == step["n_query_blocks"] - i - 1
    legend = [p.get_facecolor()[:3] for p in patches(fig, "legend")]  # one swatch per state, as the blocks are tinted
    key = ROLE_COLOURS["key"]
    assert legend == [pytest.approx(to_rgb(c)) for c in (key, tint(key, DONE), tint(key, LATER))]
    for state, colour in (("done", tint(key, DONE)), ("later", tint(key, LATER))):
        for p in patches(fig, f"k-{state}"):
            assert p.get_facecolor()[:3] == pytest.approx(to_rgb(colour))


def test_the_tile_sits_in_its_query_blocks_row_and_its_key_blocks_column():
    fig = draw_tiled_loop(L=12, S=16, block_q=4, block_k=4, d_head=4, query_block=1, key_block=2)
    scores, tile = patches(fig, "scores")[0], patches(fig, "tile")[0]
    k_now = patches(fig, "k-now")[0]
    assert tile.get_x() == pytest.approx(scores.get_x() + 8) and tile.get_width() == pytest.approx(4)
    assert tile.get_y() == pytest.approx(scores.get_y() + 4) and tile.get_height() == pytest.approx(4)
    assert k_now.get_x() == pytest.approx(tile.get_x()) and k_now.get_width() == pytest.approx(tile.get_width())


@pytest.mark.parametrize("call, match", [
    (lambda: tile_step(12, 16, 4, 4, 4, query_block=3), "query_block=3 must be an integer from 0 to 2"),
    (lambda: tile_step(12, 16, 4, 4, 4, key_block=-1), "key_block=-1 must be an integer from 0 to 3"),
    (lambda: tile_step(12, 16, 4, 4, 4, key_block=True), "key_block=True must be an integer"),
    (lambda: tile_step(0, 16, 4, 4, 4), "L=0 must be a positive integer"),
    (lambda: draw_tiled_loop(block_k=0), "block_k=0 must be a positive integer"),
    (lambda: draw_tiled_loop(max_cells=0), "max_cells=0 must be a positive integer"),
])
def test_bad_steps_and_sizes_are_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()
