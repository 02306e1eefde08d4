"""The legibility rule of lib.book.figures, both ways: a figure that must pass and one that must fail."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from lib.book import figures, records  # noqa: E402
from lib.book.figures import BODY_PX, DPI, PAGE_PX, legibility, panels  # noqa: E402


def test_a_single_panel_at_default_fonts_is_legible():
    fig, ax = plt.subplots(figsize=(6.4, 4))
    ax.plot([0, 1], [1, 0], label="a line")
    ax.set(xlabel="x", ylabel="y", title="one panel")
    ax.legend()
    seen = legibility(fig)
    plt.close(fig)
    assert seen.ok, seen.message("single")
    assert seen.scale == 1.0 and seen.smallest_px == pytest.approx(10 * DPI / 72)


def test_four_panels_in_a_row_with_small_legends_are_not():
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.8))
    for ax in axes:
        ax.plot([0, 1], [1, 0], label="tiny legend")
        ax.legend(fontsize=7)
    seen = legibility(fig)
    plt.close(fig)
    assert not seen.ok and seen.scale < 0.6
    assert seen.small[0][0] == "tiny legend" and seen.small[0][1] < 8
    assert "fewer panels per row" in seen.message("wide")


def test_the_scale_follows_the_png_width():
    fig, ax = plt.subplots(figsize=(2 * PAGE_PX / DPI, 3))
    ax.plot([0, 1])
    seen = legibility(fig)
    plt.close(fig)
    assert seen.scale == pytest.approx(PAGE_PX / seen.width_px)
    assert seen.width_px > PAGE_PX


def test_only_drawn_texts_count():
    """An invisible or empty text is not seen by a reader, so it cannot fail the figure."""
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([0, 1])
    ax.text(0.5, 0.5, "hidden", fontsize=3).set_visible(False)
    ax.text(0.5, 0.4, "   ", fontsize=3)
    assert legibility(fig).ok
    ax.text(0.5, 0.3, "shown", fontsize=3)
    seen = legibility(fig)
    plt.close(fig)
    assert [t for t, _ in seen.small] == ["shown"]


def test_panels_wraps_rows_and_removes_unused_cells():
    fig, axes = panels(5, ncols=2, panel=(3.5, 3))
    assert len(axes) == 5 and len(fig.axes) == 5
    assert tuple(fig.get_size_inches()) == (7.0, 9.0)
    plt.close(fig)
    with pytest.raises(ValueError, match="n must be at least 1"):
        panels(0)


def test_show_figure_records_legibility_and_warns_below_body_size(tmp_path, monkeypatch):
    monkeypatch.setenv(records.RECORDS_ENV, str(tmp_path))
    records.start("figs", {})
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([0, 1])
    records.show_figure("good", fig)
    fig, axes = plt.subplots(1, 4, figsize=(16, 3))
    with pytest.warns(UserWarning, match="'bad'.*below the body size"):
        records.show_figure("bad", fig)
    meta = records.load_records("figs", tmp_path)["meta"]["figures"]
    assert meta["good"]["small"] == 0 and meta["good"]["smallest_px"] >= BODY_PX
    assert meta["bad"]["small"] > 0 and meta["bad"]["smallest_px"] < BODY_PX
    records._state.update(chapter=None, values={}, meta={})


def test_mathtext_is_measured_too():
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.set_xlabel(r"$\chi$", fontsize=4)
    seen = legibility(fig)
    plt.close(fig)
    assert any("chi" in t for t, _ in seen.small)
    assert figures.BODY_PX == BODY_PX
