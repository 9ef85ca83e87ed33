"""Chapter 1's picture of the two causal-mask alignments colours each cell by what it means."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402

from attention_book import causal_mask  # noqa: E402
from attention_book.figures.plotting import MASK_COLOURS, plot_causal_alignments  # noqa: E402


def cell_colours(ax):
    return np.asarray(ax.images[0].get_array())[..., :3]


@pytest.mark.parametrize("L, S", [(3, 6), (1, 5), (4, 4)])
def test_each_cell_has_the_colour_of_its_meaning(L, S):
    fig = plot_causal_alignments(L, S)
    left, right = cell_colours(fig.axes[0]), cell_colours(fig.axes[1])
    may, may_not, hidden = (np.array(to_rgb(c)) for c in MASK_COLOURS.values())
    allowed = causal_mask(L, S).numpy()
    assert np.allclose(right[allowed], may) and np.allclose(right[~allowed], may_not)
    top_left = np.tril(np.ones((L, S), dtype=bool))
    assert np.allclose(left[top_left], may)
    assert np.allclose(left[~top_left & allowed], hidden)  # past keys the top-left mask hides
    assert np.allclose(left[~allowed], may_not)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [str(p) for p in range(S - L, S)]
    plt.close(fig)


def test_rejects_more_queries_than_keys():
    with pytest.raises(ValueError, match="need L <= S"):
        plot_causal_alignments(5, 3)


@pytest.mark.parametrize("L, S", [(3, 6), (4, 4)])
def test_mistakes_are_hatched_for_greyscale(L, S):
    fig = plot_causal_alignments(L, S)
    hatched = [p for p in fig.axes[0].patches if p.get_gid() == "mistake"]
    top_left = np.tril(np.ones((L, S), dtype=bool))
    assert len(hatched) == int((~top_left & causal_mask(L, S).numpy()).sum())
    assert not [p for p in fig.axes[1].patches if p.get_gid() == "mistake"]
    plt.close(fig)
