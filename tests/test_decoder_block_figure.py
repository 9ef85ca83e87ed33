"""Chapter 3's picture of a whole decoder block: the stream, the norms, the heads with their slices, the MLP."""
import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402

from attention_book.figures.decoder_block import draw_decoder_block  # noqa: E402
from attention_book.figures.style import ROLE_COLOURS, head_colour, tint  # noqa: E402



def parts(fig, gid):
    return [p for p in fig.axes[0].patches if p.get_gid() == gid]


def texts(fig):
    return [t.get_text() for t in fig.axes[0].texts]


@pytest.mark.parametrize("n_heads, shown", [(1, [0]), (3, [0, 1, 2]), (4, [0, 1, 2, 3]), (9, [0, 1, 8]),
                                            (32, [0, 1, 31])])
def test_every_shown_head_reads_through_its_slices_and_writes_through_its_w_o(n_heads, shown):
    fig = draw_decoder_block(n_heads, d_model=64 * n_heads)
    labels = texts(fig)
    assert [t for t in labels if t.startswith("head ") and t[5:].isdigit()] == [f"head {i}" for i in shown]
    assert [t for t in labels if t.startswith("W_O,") and t[4:].isdigit()] == [f"W_O,{i}" for i in shown]
    assert ("..." in labels) == (n_heads > 4)
    for gid in ("w-q", "w-k", "w-v", "w-o", "head"):  # each shown head has its own three slices and its W_O slice
        assert len(parts(fig, gid)) == len(shown), gid


def test_heads_take_their_hues_and_the_slices_the_colours_of_queries_keys_values():
    fig = draw_decoder_block(4, 256)
    assert [p.get_facecolor()[:3] for p in parts(fig, "head")] == [pytest.approx(to_rgb(head_colour(i)))
                                                                   for i in range(4)]
    assert [p.get_facecolor()[:3] for p in parts(fig, "w-o")] == [pytest.approx(tint(head_colour(i), 0.5))
                                                                  for i in range(4)]
    for gid, role in (("w-q", "query"), ("w-k", "key"), ("w-v", "value")):
        assert {tuple(round(c, 6) for c in p.get_facecolor()[:3]) for p in parts(fig, gid)} == {
            tuple(round(c, 6) for c in tint(ROLE_COLOURS[role], 0.35))}


def test_a_pre_norm_block_between_the_embedding_and_the_unembedding():
    fig = draw_decoder_block(4, 256)
    assert len(parts(fig, "norm")) == 3  # before attention, before the MLP, and the final norm
    assert len(parts(fig, "add")) == 2  # attention and MLP each add to the stream
    for gid in ("stream", "mlp", "embedding", "unembedding", "block"):
        assert len(parts(fig, gid)) == 1, gid
    stream = parts(fig, "stream")[0]
    bottom, top = stream.get_y(), stream.get_y() + stream.get_height()
    centres = sorted(p.center[1] for p in parts(fig, "add"))
    assert all(bottom < y < top for y in centres)  # both sums land on the stream
    norms = sorted(p.get_y() for p in parts(fig, "norm"))
    assert norms[0] < centres[0] < norms[1] < centres[1] < norms[2]  # norm, attention, +, norm, MLP, +, final norm


def test_labels_carry_the_reader_s_sizes():
    fig = draw_decoder_block(9, 576, 64, n_layers=30, d_ff=1536)
    labels = "\n".join(texts(fig))
    assert "(d_model, d_head) = (576, 64)" in labels
    assert "(d_head, d_model)\n= (64, 576)" in labels
    assert "d_model = 576" in labels and "h = 9 heads" in labels
    assert "decoder block × 30" in labels and "d_ff = 1536" in labels
    assert "the model stacks 30 such blocks" in labels and "d_ff: the MLP's hidden width" in labels
    assert "head 0 W_O,0 + … + head 8 W_O,8  =  concat(heads) W_O" in labels  # the sum, with the reader's h
    assert fig.axes[0].get_title() == ("A decoder-only transformer, one pre-norm block drawn: h = 9, d_model = 576, "
                                       "d_head = 64")
    assert draw_decoder_block(2, 8, title="Mine").axes[0].get_title() == "Mine"
    small = "\n".join(texts(draw_decoder_block(2, 8)))
    assert "decoder block × N" in small and "N: how many such blocks the model stacks" in small
    assert "head 0 W_O,0 + head 1 W_O,1  =  concat(heads) W_O" in small
    assert "d_model → d_ff → d_model" in small
    assert "head 0 W_O,0  =  concat(heads) W_O" in "\n".join(texts(draw_decoder_block(1, 8)))


def test_drawn_sharp_enough_for_its_small_labels():
    fig = draw_decoder_block(8, 512)
    assert fig.dpi >= 150
    width, height = fig.get_size_inches() * fig.dpi
    assert width > 1200 and height > 1000  # pixels, before the page scales it down
    assert "(d_model, d_head) = (8, 4)" in "\n".join(texts(draw_decoder_block(2, 8)))  # d_head = d_model // h


@pytest.mark.parametrize("kwargs, message", [
    ({"n_heads": 0}, "n_heads=0 must be a positive integer"),
    ({"d_model": -4}, "d_model=-4 must be a positive integer"),
    ({"d_head": 2.5}, "d_head=2.5 must be a positive integer"),
    ({"n_layers": 0}, "n_layers=0 must be a positive integer"),
    ({"d_ff": 0}, "d_ff=0 must be a positive integer"),
    ({"max_shown": 2}, "max_shown=2 must be at least 3"),
])
def test_rejects_bad_sizes_naming_the_parameter(kwargs, message):
    with pytest.raises(ValueError, match=message):
        draw_decoder_block(**{"n_heads": 4, "d_model": 64, **kwargs})
