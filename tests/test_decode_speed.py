"""Chapter 12's chart of decode speed against the roofline: it draws for several sets of rates, one bar per label in
order, each annotated with its tokens/s and its fraction of the roofline, a dashed line at the roofline, bars apart
without colour (hatches), and rejects bad input by name."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from attention_book.figures.decode_speed import ROOFLINE_LABEL, draw_decode_speed, speed_label  # noqa: E402

SMOL = {"transformers generate": 15.8, "the book, plain layers": 16.5, "the book, sped up": 36.0}



def bars(ax):
    return [p for p in ax.patches if p.get_gid() == "rate"]


def test_speed_label_gives_the_rate_and_its_fraction_of_the_roofline():
    assert speed_label(36.0, 60.2) == "36.0 tokens/s, 60% of the roofline"
    assert speed_label(15.8, 60.2) == "15.8 tokens/s, 26% of the roofline"
    assert speed_label(70, 60) == "70.0 tokens/s, 117% of the roofline"


@pytest.mark.parametrize("rates, roofline", [(SMOL, 60.2), ({"one way": 5}, 80), ({"a": 70.0, "b": 5.0}, 60.2),
                                             ({f"way {i}": 3.0 * (i + 1) for i in range(7)}, 12)])
def test_one_bar_per_label_in_order_annotated_against_the_roofline(rates, roofline):
    fig = draw_decode_speed(rates, roofline, title="a title")
    ax = fig.axes[0]
    drawn = bars(ax)
    assert [b.get_width() for b in drawn] == pytest.approx(list(rates.values()))
    assert [label.get_text() for label in ax.get_yticklabels()] == list(rates)
    tops = [b.get_y() for b in drawn]  # the first label on top: y grows downwards
    assert ax.yaxis_inverted() and tops == sorted(tops)
    texts = [t.get_text() for t in ax.texts]
    assert [speed_label(r, roofline) in texts for r in rates.values()] == [True] * len(rates)
    assert f"{ROOFLINE_LABEL}\n= {roofline:.1f} tokens/s" in texts
    (line,) = [line for line in ax.lines if line.get_gid() == "roofline"]
    assert list(line.get_xdata()) == [roofline, roofline] and line.get_linestyle() == "--"
    assert ax.get_xlim()[0] == 0 and ax.get_xlim()[1] >= 1.5 * max([*rates.values(), roofline])
    assert ax.get_title() == "a title"


def test_neighbouring_bars_differ_by_hatch_not_colour_alone():
    drawn = bars(draw_decode_speed(SMOL, 60.2).axes[0])
    hatches = [b.get_hatch() or "" for b in drawn]
    assert len(set(hatches)) == len(drawn)


def test_draws_on_given_axes():
    fig, ax = plt.subplots()
    assert draw_decode_speed(SMOL, 60.2, ax=ax) is fig


@pytest.mark.parametrize("rates, roofline, name", [
    ({}, 60, "rates"), ([("a", 1.0)], 60, "rates"), ({"a": 0}, 60, "rates['a']"), ({"a": -1.0}, 60, "rates['a']"),
    ({"a": float("nan")}, 60, "rates['a']"), ({"a": "fast"}, 60, "rates['a']"), ({"": 1.0}, 60, "rates"),
    ({"a": True}, 60, "rates['a']"), (SMOL, 0, "roofline"), (SMOL, None, "roofline"), (SMOL, float("inf"), "roofline"),
])
def test_bad_input_is_rejected_by_name(rates, roofline, name):
    with pytest.raises(ValueError, match=name.replace("[", r"\[")):
        draw_decode_speed(rates, roofline)
