"""The roofline chart (chapters 7, 10 and 14): each point's label sits beside it without crossing the slope, the
ceiling, another label or a marker, and inside the axes; a label can carry the point's FLOPs and time (time = FLOPs
/ height); points that are not MHA, GQA or MQA take colours that the variants on the chart do not use."""
import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from attention_book.figures.roofline import _segment_hits_box, _segments_meet, draw_roofline, point_note  # noqa: E402
from attention_book.figures.style import VARIANT_COLOURS  # noqa: E402

MLA = [("naive MLA", 31.4, 30.6e9, 8632e6), ("absorbed MLA", 7.2, 16.3e9, 143e6), ("MHA", 0.5, 7.8e9, 42e6)]
CASES = [  # (bandwidth, flop_rate, points): chapter 14's runs (MHA above and below its slope, ridges from 3 to 8),
    # chapter 7's (a point above the ceiling) and chapter 10's
    (8.6e9, 44e9, MLA), (15.3e9, 50e9, [(n, i, a * 0.6, f) for n, i, a, f in MLA]),
    (12.3e9, 93e9, [("naive MLA", 31.4, 50e9, 8632e6), ("absorbed MLA", 7.2, 20e9, 143e6), ("MHA", 0.5, 5e9, 42e6)]),
    (21e9, 40e9, [("naive MLA", 31.4, 25e9, 8632e6), ("absorbed MLA", 7.2, 9e9, 143e6), ("MHA", 0.5, 10e9, 42e6)]),
    (12.5e9, 36e9, [("MHA, g = 32", 0.5, 1.6e9), ("MQA, g = 1", 16, 52e9)]),
    (12.9e9, 42e9, [("MHA, g = 8", 0.5, 1.55e9), ("GQA, g = 4", 1, 2.9e9), ("GQA, g = 2", 2, 7.2e9),
                    ("MQA, g = 1", 4, 23e9)]),
]



def labels_and_lines(fig, points):
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    names = {p[0] for p in points}
    notes = [t for t in ax.texts if t.get_text().split("\n")[0] in names]
    to_display = ax.transData.transform
    slope, ceiling = ax.lines[0], ax.lines[1]
    segments = [tuple(to_display(xy) for xy in zip(line.get_xdata(), line.get_ydata(), strict=True))
                for line in (slope, ceiling)]
    return ax, renderer, notes, segments


@pytest.mark.parametrize("bandwidth, flop_rate, points", CASES)
def test_labels_cross_no_line_no_label_and_stay_inside(bandwidth, flop_rate, points):
    fig = draw_roofline(bandwidth, flop_rate, points, title="a title")
    ax, renderer, notes, segments = labels_and_lines(fig, points)
    assert len(notes) == len(points)
    boxes = [note.get_window_extent(renderer) for note in notes]
    inside = ax.get_window_extent(renderer)
    for note, box in zip(notes, boxes, strict=True):
        point = ax.transData.transform(note.xy)
        centre = ((box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2)
        assert not any(_segment_hits_box(p, q, box) for p, q in segments), note.get_text()
        assert not any(_segments_meet(point, centre, p, q) for p, q in segments), f"{note.get_text()}: across a line"
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1
    for i, box in enumerate(boxes):
        assert not any(box.overlaps(other) for other in boxes[i + 1:]), notes[i].get_text()


def test_a_label_with_flops_gives_the_time_they_take_at_that_height():
    assert point_note(8632e6, 30.6e9) == "8,632 MFLOP in 282 ms"
    assert point_note(143e6, 16.3e9) == "143 MFLOP in 8.77 ms"
    assert point_note(42e6, 7.8e9) == "42 MFLOP in 5.38 ms"
    assert point_note(2e6, 1e9) == "2 MFLOP in 2 ms"
    fig = draw_roofline(8.6e9, 44e9, MLA)
    texts = [t.get_text() for t in fig.axes[0].texts]
    for name, _, attained, flops in MLA:
        assert f"{name}\n{point_note(flops, attained)}" in texts


def test_other_points_do_not_take_a_variants_colour():
    fig = draw_roofline(8.6e9, 44e9, MLA)
    colours = [to_hex(line.get_color()) for line in fig.axes[0].lines if line.get_gid() == "measured"]
    assert colours[2] == to_hex(VARIANT_COLOURS["MHA"])
    assert len(set(colours)) == 3  # naive, absorbed and MHA each their own


def test_the_x_axis_title_can_say_what_the_bytes_are():
    fig = draw_roofline(8.6e9, 44e9, MLA, xlabel="arithmetic intensity (FLOP per byte read or written)")
    assert fig.axes[0].get_xlabel() == "arithmetic intensity (FLOP per byte read or written)"
    assert draw_roofline(8.6e9, 44e9, MLA[:1]).axes[0].get_xlabel() == "arithmetic intensity (FLOP per byte read)"


@pytest.mark.parametrize("point, name", [(("a", 1, 1, 0), "flops"), (("a", 1, 1, 1, 1), "points are"),
                                         (("a", 1), "points are")])
def test_bad_points_are_named(point, name):
    with pytest.raises(ValueError, match=name):
        draw_roofline(1e9, 1e9, [point])
