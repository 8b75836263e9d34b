"""sweeps/plots.py: the figures of a sweep's summary (accuracy_vs_time.png, memory.png, loss_curves.png)."""

import numpy as np
import pytest

from mha_textclf.sweeps.collect import runs_table
from mha_textclf.sweeps.plots import plot_accuracy_by_seed, plot_accuracy_vs_time, plot_loss_curves, plot_memory
from sweep_fakes import fake_run


def test_the_sweep_legend_lists_only_the_values_the_sweep_has(tmp_path):
    for i, model in enumerate(["naive", "efficient"]):
        fake_run(tmp_path / f"{i}_run", model=model)  # pe=False only
    figure = plot_loss_curves(tmp_path, runs_table(tmp_path))
    labels = [t.get_text() for legend in figure.legends for t in legend.get_texts()]
    assert "pe=False" in labels and "pe=True" not in labels
    assert all(float(t).is_integer() for ax in figure.axes for t in ax.get_xticks())


def test_the_memory_panel_shows_each_variant_mean_and_range(tmp_path):
    for i, (model, pe, rss) in enumerate([("naive", False, 600.0), ("naive", False, 610.0), ("naive", False, 650.0),
                                          ("torch", True, 700.0)]):
        fake_run(tmp_path / f"{i}_run", model=model, pe=pe, seed=i, stages={"fit": {"peak_memory_mb": rss}})
    (ax,) = plot_memory(runs_table(tmp_path)).axes
    label_at = {tick: label.get_text() for tick, label in zip(ax.get_yticks(), ax.get_yticklabels(), strict=True)}
    widths = {label_at[p.get_y() + p.get_height() / 2]: p.get_width() for p in ax.patches}
    assert widths == {"naive, pe=False (3 runs)": 620.0, "torch, pe=True (1 run)": 700.0}
    # Whiskers from the lowest run to the highest (not symmetric about the mean).
    (whiskers,) = [c for c in ax.collections if len(c.get_segments()) == 2]
    ranges = {label_at[segment[0, 1]]: tuple(segment[:, 0]) for segment in whiskers.get_segments()}
    assert ranges == {"naive, pe=False (3 runs)": (600.0, 650.0), "torch, pe=True (1 run)": (700.0, 700.0)}
    assert ax.get_xlim()[1] > 700.0  # the longest bar ends inside the axes


def scatter_points(ax) -> np.ndarray:
    return np.concatenate([c.get_offsets() for c in ax.collections])


def assert_readable(ax, points):
    for axis, values, (low, high) in (("x", points[:, 0], ax.get_xlim()), ("y", points[:, 1], ax.get_ylim())):
        labels = [t.get_text() for t in getattr(ax, f"get_{axis}ticklabels")()]
        ticks = getattr(ax, f"get_{axis}ticks")()
        assert all(float(label) == pytest.approx(tick) for label, tick in zip(labels, ticks, strict=True)), labels
        assert not getattr(ax, f"get_{axis}ticklabels")(minor=True)  # no 8×10⁰-style minor labels
        assert ticks.min() <= values.min() and values.max() <= ticks.max()  # the ticks bracket every point
        assert low < values.min() and values.max() < high  # every point strictly inside the axes


def test_accuracy_vs_time_reads_at_a_glance(tmp_path):
    """The issue's sweep: 8 to 19 training seconds, where matplotlib's log axis read 8×10⁰, 9×10⁰, 10¹ and put
    two variants past the last tick. The legend, outside the axes, names each variant, its pe and its number of runs:
    laid out, the legend's box and the axes' do not meet."""
    for i, (model, pe, seconds, accuracy) in enumerate([("efficient", True, 8.1, 0.92), ("naive", True, 12.4, 0.925),
                                                        ("torch", True, 18.9, 0.924), ("efficient", False, 8.3, 0.95)]):
        fake_run(tmp_path / f"{i}_run", model=model, pe=pe, seed=0, accuracy=accuracy, epoch_times=[seconds])
    figure = plot_accuracy_vs_time(runs_table(tmp_path))
    (ax,) = figure.axes
    assert ax.get_xscale() == "linear"
    assert_readable(ax, scatter_points(ax))
    labels = [t.get_text() for legend in figure.legends for t in legend.get_texts()]
    assert labels == ["efficient, pe=False (1 run)", "efficient, pe=True (1 run)", "naive, pe=True (1 run)",
                      "torch, pe=True (1 run)"]
    figure.draw_without_rendering()  # the layout as savefig makes it
    (legend,) = figure.legends
    assert not legend.get_window_extent().overlaps(ax.get_window_extent())
    # Colour by model, marker by pe: a circle for pe=True, a square for pe=False.
    from matplotlib.markers import MarkerStyle

    def marker(name):
        style = MarkerStyle(name)
        return style.get_path().transformed(style.get_transform()).vertices.tolist()

    points = {c.get_label(): c for c in ax.collections}
    assert {label: points[label].get_paths()[0].vertices.tolist() for label in labels} == {
        label: marker("o" if "pe=True" in label else "s") for label in labels}
    colours = {label: tuple(points[label].get_facecolor()[0]) for label in labels}
    assert colours["efficient, pe=False (1 run)"] == colours["efficient, pe=True (1 run)"]
    assert len({colours[label] for label in labels[1:]}) == 3


def test_accuracy_vs_time_over_decades_has_plain_log_ticks(tmp_path):
    for i, seconds in enumerate([0.3, 4.0, 180.0]):
        fake_run(tmp_path / f"{i}_run", seed=i, accuracy=0.9 + i / 100, epoch_times=[seconds])
    fake_run(tmp_path / "3_tfidf", model="tfidf-words", pe=None, accuracy=1.0, epoch_times=[0.05])
    (ax,) = plot_accuracy_vs_time(runs_table(tmp_path)).axes
    assert ax.get_xscale() == "log"
    assert_readable(ax, scatter_points(ax))
    assert [t.get_text() for t in ax.get_xticklabels()][:3] == ["0.05", "0.1", "0.2"]


@pytest.mark.unit
@pytest.mark.parametrize(("slowest", "scale"), [(9.5, "linear"), (10.5, "log")])
def test_accuracy_vs_time_takes_a_log_axis_once_the_times_span_more_than_10x(tmp_path, slowest, scale):
    """Ticks are plain numbers that bracket every point, on a log axis with 1-2-5 ticks only when the times span more
    than 10×: 1 to 9.5 training seconds stay linear, 1 to 10.5 go on a log axis."""
    for i, seconds in enumerate([1.0, 3.0, slowest]):
        fake_run(tmp_path / f"{i}_run", seed=i, accuracy=0.9, epoch_times=[seconds])
    (ax,) = plot_accuracy_vs_time(runs_table(tmp_path)).axes
    assert ax.get_xscale() == scale
    assert_readable(ax, scatter_points(ax))
    assert ("log scale" in ax.get_xlabel()) == (scale == "log")


def test_accuracy_vs_time_plots_each_runs_test_accuracy_against_its_training_seconds(tmp_path):
    """accuracy_vs_time.png plots test accuracy against training seconds, one point per run (not validation
    accuracy, not the median epoch: runs of several epochs, and validation apart from test)."""
    runs = [("efficient", 0, [2.0, 3.0, 4.0], 0.80, 0.91), ("efficient", 1, [2.5, 2.5, 2.5], 0.82, 0.93),
            ("naive", 0, [6.0, 7.0], 0.70, 0.88)]
    for i, (model, seed, times, val, test) in enumerate(runs):
        fake_run(tmp_path / f"{i}_run", model=model, seed=seed, accuracy=val, test_accuracy=test, epoch_times=times)
    (ax,) = plot_accuracy_vs_time(runs_table(tmp_path)).axes
    points = np.array(sorted(map(tuple, scatter_points(ax).tolist())))
    expected = np.array(sorted((sum(times), test) for _, _, times, _, test in runs))
    np.testing.assert_allclose(points, expected)
    assert ax.get_ylabel() == "test accuracy" and ax.get_xlabel().startswith("training seconds")


def test_loss_curves_are_the_mean_with_the_spread_as_a_band(tmp_path):
    """Each loss curve is the mean over the variant's runs, with the lowest-to-highest run as a band: naive pe=False
    over three runs, pe=True over two (a band from two runs too), and torch's single run a line without one."""
    # Three runs, one far above the others: their mean, not their median (the two agree for two runs).
    curves = [[(1.0, 1.2), (0.6, 1.0), (0.4, 0.9)], [(1.2, 1.4), (0.8, 1.1), (0.5, 1.0)],
              [(3.0, 3.2), (2.0, 2.6), (1.5, 2.2)]]
    for seed, losses in enumerate(curves):
        fake_run(tmp_path / f"{seed}_run", model="naive", seed=seed, epoch_times=[1.0] * 3, losses=losses)
    two = [[(1.0, 1.1), (0.5, 0.9), (0.5, 0.9)], [(2.0, 2.1), (1.5, 1.9), (1.0, 1.2)]]
    for seed, losses in enumerate(two, start=3):
        fake_run(tmp_path / f"{seed}_run", model="naive", pe=True, seed=seed, epoch_times=[1.0] * 3, losses=losses)
    fake_run(tmp_path / "5_run", model="torch", epoch_times=[1.0] * 3)
    figure = plot_loss_curves(tmp_path, runs_table(tmp_path))
    assert not [band for band in figure.axes[1].collections if band.get_gid()]  # torch: one run, no band
    ax = figure.axes[0]
    lines = {line.get_gid(): line for line in ax.get_lines() if line.get_gid()}
    train = np.array([[t for t, _ in c] for c in curves])
    assert lines["pe=False|train_loss"].get_ydata() == pytest.approx(train.mean(axis=0))
    val = np.array([[v for _, v in c] for c in curves])
    assert lines["pe=False|val_loss"].get_ydata() == pytest.approx(val.mean(axis=0))
    assert (lines["pe=False|train_loss"].get_linestyle(), lines["pe=False|val_loss"].get_linestyle()) == ("-", "--")
    bands = {band.get_gid(): band for band in ax.collections if band.get_gid()}
    assert set(bands) == {f"pe={pe}|{column}" for pe in (False, True) for column in ("train_loss", "val_loss")}
    two_train = np.array([[t for t, _ in c] for c in two])
    for gid, runs in (("pe=False|train_loss", train), ("pe=True|train_loss", two_train)):
        vertices = bands[gid].get_paths()[0].vertices
        for epoch, (low, high) in enumerate(zip(runs.min(axis=0), runs.max(axis=0), strict=True), start=1):
            assert sorted(set(vertices[vertices[:, 0] == epoch][:, 1])) == pytest.approx([low, high])
    labels = [t.get_text() for legend in figure.legends for t in legend.get_texts()]
    assert labels[:2] == ["pe=False", "pe=True"]


def test_loss_curves_have_one_panel_per_model_each_drawing_only_its_own_runs(tmp_path):
    """loss_curves.png draws train (solid) and val (dashed) loss per epoch, one panel per model, one colour per pe:
    each panel is titled with its model and draws the mean over that model's runs alone, in the colour
    of each pe value, the same colour for a pe value in every panel."""
    curves = {("efficient", False): [(1.0, 1.2), (0.6, 1.0)], ("efficient", True): [(1.1, 1.3), (0.7, 1.1)],
              ("naive", False): [(3.0, 3.2), (2.0, 2.6)]}
    for i, ((model, pe), losses) in enumerate(curves.items()):
        fake_run(tmp_path / f"{i}_run", model=model, pe=pe, epoch_times=[1.0] * 2, losses=losses)
    figure = plot_loss_curves(tmp_path, runs_table(tmp_path))
    panels = {ax.get_title(): ax for ax in figure.axes}
    assert set(panels) == {"efficient", "naive"}
    drawn = {(title, line.get_gid()): line for title, ax in panels.items() for line in ax.get_lines() if line.get_gid()}
    expected = {(model, f"pe={pe}|{column}"): [row[c] for row in curve]
                for (model, pe), curve in curves.items() for c, column in enumerate(("train_loss", "val_loss"))}
    assert set(drawn) == set(expected)
    for key, line in drawn.items():
        assert line.get_ydata() == pytest.approx(expected[key]), key
    colours = {key: line.get_color() for key, line in drawn.items()}
    assert colours["efficient", "pe=False|train_loss"] == colours["naive", "pe=False|val_loss"]
    assert colours["efficient", "pe=False|train_loss"] != colours["efficient", "pe=True|train_loss"]


def test_loss_curves_keep_one_colour_per_variant_in_every_panel_when_the_sweep_varies_another_setting(tmp_path):
    """The loss curves take one colour per pe, per pe and setting when the sweep varies another setting: with two
    models at two dropouts, each dropout has one colour in both panels, the legend's, and the two colours differ (the
    second panel once drew both in a third colour, one the legend did not have)."""
    for model in ("efficient", "naive"):
        for dropout in (0.1, 0.3):
            fake_run(tmp_path / f"{model}_{dropout}", model=model, model__dropout=dropout)
    figure = plot_loss_curves(tmp_path, runs_table(tmp_path))
    drawn = {}
    for ax in figure.axes:
        for line in ax.get_lines():
            if line.get_gid():
                drawn.setdefault(line.get_gid().split("|")[0], set()).add(line.get_color())
    legend = {text.get_text(): handle.get_color()
              for text, handle in zip(figure.legends[0].get_texts(), figure.legends[0].legend_handles, strict=True)
              if "dropout" in text.get_text()}
    assert set(drawn) == set(legend) and len(legend) == 2, (drawn, legend)
    for label, colours in drawn.items():
        assert colours == {legend[label]}, label
    assert len(set(legend.values())) == 2


def test_a_search_s_drawn_settings_read_to_4_digits_and_leave_the_panels_room(tmp_path):
    """A search's trials differ in several drawn settings, each a float with every digit: the plots name them to 4
    significant digits, as summary.md does, and grow beside their labels instead of squeezing the panels to nothing
    (matplotlib's constrained layout warned and gave up)."""
    import warnings

    drawn = [(0.006789203913136309, 0.0025908263815127), (0.004326470799734504, 0.0010005268542378305)]
    for i, (dropout, embedding) in enumerate(drawn):
        fake_run(tmp_path / f"trial_{i:03d}", seed=i, stages={"fit": {"peak_memory_mb": 600.0}},
                 model__dropout=dropout, model__embedding_dropout=embedding, model__token_dropout=0.43319590265384 + i,
                 model__mlp_dropout=0.2557590390040907 + i, model__d_model=64 * (i + 1))
    runs = runs_table(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "constrained_layout not applied because axes sizes collapsed to zero"
        figures = {"loss": plot_loss_curves(tmp_path, runs), "memory": plot_memory(runs),
                   "seeds": plot_accuracy_by_seed(runs, "bbc-news")}
        for figure in figures.values():
            figure.savefig(tmp_path / "figure.png")
    legend = [t.get_text() for t in figures["loss"].legends[0].get_texts()]
    assert "pe=False, model.d_model=64, model.dropout=0.006789, model.embedding_dropout=0.002591, " \
           "model.mlp_dropout=0.2558, model.token_dropout=0.4332" in legend, legend
    (ax,) = figures["memory"].axes
    assert [t.get_text() for t in ax.get_yticklabels()][-1].endswith(
        "model.mlp_dropout=0.2558, model.token_dropout=0.4332 (1 run)"), ax.get_yticklabels()
