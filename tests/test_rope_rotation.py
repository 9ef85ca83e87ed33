"""Chapter 11's figure of RoPE as a rotation: it draws for several sizes, prints the same angle between the query and
the key before and after both positions shift, turns the pair as the package's apply_rope does, and rejects bad
input by name."""
import math

import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402

from attention_book.figures.rope_rotation import draw_rope_rotation, pair_turns  # noqa: E402



def angle_texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid() == "angle"]


@pytest.mark.parametrize("d_head, base, pair", [(2, 10_000.0, 0), (8, 10_000.0, 1), (64, 100_000.0, 31),
                                                (6, 3.0, 2)])
@pytest.mark.parametrize("position", [0, 1, 17, 1000])
def test_pair_turns_by_position_times_theta(d_head, base, pair, position):
    theta = base ** (-2 * pair / d_head)
    expected = (30.0 + math.degrees(position * theta)) % 360
    got = pair_turns(d_head, base, pair, position, 30.0)
    assert min(abs(got - expected), 360 - abs(got - expected)) < 1e-3 * (1 + position)


@pytest.mark.parametrize("kwargs", [{}, {"d_head": 2}, {"d_head": 64, "base": 100_000.0, "pair": 5},
                                    {"positions": (0, 9), "shift": 100, "pair": 2}, {"shift": 0},
                                    {"d_head": 128, "pair": 63, "q_angle": -40.0, "k_angle": 200.0}])
def test_the_angle_between_q_and_k_survives_a_shift(kwargs):
    fig = draw_rope_rotation(**kwargs)
    first, second = angle_texts(fig)
    assert first == second and first.startswith("angle between q and k: ")
    d_head, base = kwargs.get("d_head", 8), kwargs.get("base", 10_000.0)
    pair, (m, n) = kwargs.get("pair", 0), kwargs.get("positions", (3, 1))
    q, k = kwargs.get("q_angle", 20.0), kwargs.get("k_angle", 60.0)
    between = abs((k - q + math.degrees((n - m) * base ** (-2 * pair / d_head)) + 180) % 360 - 180)
    assert abs(float(first.split(": ")[1].split("°")[0]) - between) <= 0.5 + 1e-3
    bars = [p for p in fig.axes[2].patches if p.get_gid() == "drawn-pair"]
    assert len(bars) == 1 and bars[0].get_hatch() == "///"
    assert len(fig.axes[2].patches) == d_head // 2
    heights = [p.get_height() for p in fig.axes[2].patches]  # theta_i in radians per token, as the text says
    assert all(abs(h - base ** (-2 * i / d_head)) < 1e-6 * base ** (-2 * i / d_head) for i, h in enumerate(heights))
    assert "radians" in fig.axes[2].get_ylabel()


@pytest.mark.parametrize("kwargs, name", [({"d_head": 7}, "d_head=7"), ({"d_head": 0}, "d_head=0"),
                                          ({"base": 1.0}, "base=1.0"), ({"pair": 4}, "pair=4"),
                                          ({"pair": -1}, "pair=-1"), ({"positions": (1, -2)}, "positions="),
                                          ({"positions": (1,)}, "positions="), ({"shift": -3}, "shift=-3")])
def test_bad_input_is_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        draw_rope_rotation(**kwargs)
