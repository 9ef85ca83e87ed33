"""Chapter 13's chart of peak memory against the sequence length: one line per way, log-log, the slope from first to
last point in each legend entry, lines apart without colour (markers, line styles), bad input rejected by name."""
import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402

from attention_book.figures.peak_memory import draw_peak_memory, log_slope  # noqa: E402



def test_log_slope_is_the_exponent():
    assert log_slope([256, 1024], [1.0, 16.0]) == pytest.approx(2.0)
    assert log_slope([100, 200, 400], [3.0, 6.0, 12.0]) == pytest.approx(1.0)


@pytest.mark.parametrize("lengths", [[256, 512], [128, 256, 512, 1024, 4096], [1, 10, 100]])
def test_one_line_per_way_with_its_slope_and_apart_in_greyscale(lengths):
    peaks = {"materialised": [2 * 4 * n * n for n in lengths], "tiled": [4 * 64 * n + 100_000 for n in lengths]}
    fig = draw_peak_memory(lengths, peaks, title="a title")
    ax = fig.axes[0]
    lines = [line for line in ax.get_lines() if line.get_gid() == "peak"]
    assert len(lines) == 2 and ax.get_xscale() == ax.get_yscale() == "log"
    assert list(lines[0].get_ydata()) == pytest.approx([b / 2**20 for b in peaks["materialised"]])
    assert {line.get_marker() for line in lines} == {"o", "s"} and lines[0].get_linestyle() != lines[1].get_linestyle()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[0] == "materialised (slope 2.0)" and legend[1].startswith("tiled (slope ")


@pytest.mark.parametrize("lengths, peaks, match", [
    ([256], {"a": [1]}, "lengths="), ([512, 256], {"a": [1, 2]}, "lengths="), ([0, 256], {"a": [1, 2]}, "lengths="),
    ([256, 512], {}, "peaks must be a dict"), ([256, 512], {"a": [1]}, r"peaks\['a'\] must hold"),
    ([256, 512], {"a": [1, 0]}, r"peaks\['a'\] must hold"),
])
def test_bad_input_is_rejected_by_name(lengths, peaks, match):
    with pytest.raises(ValueError, match=match):
        draw_peak_memory(lengths, peaks)
