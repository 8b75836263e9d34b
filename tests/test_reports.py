"""What a run's plots say at a glance: the reported epoch, whole-number epochs, whose model on which data."""

import csv
import json

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from sklearn.metrics import f1_score

from mha_textclf.reports import plot_confusion_matrix, plot_loss_curve, split_report, time_to_accuracy
from mha_textclf.runs.files import HISTORY_COLUMNS, append_history, write_history

HISTORY = [{"epoch": e, "train_loss": 1.0 / e, "val_loss": abs(e - 2) + 0.5} for e in (1, 2, 3)]


def drawn(figure):
    FigureCanvasAgg(figure).draw()
    return figure.axes[0]


def test_the_loss_curve_marks_the_reported_epoch_on_whole_epochs():
    ax = drawn(plot_loss_curve(HISTORY, title="efficient", reported_epoch=2))
    marks = [line for line in ax.get_lines() if line.get_label().startswith("reported model")]
    assert len(marks) == 1 and set(marks[0].get_xdata()) == {2}
    assert "epoch 2" in marks[0].get_label()
    ticks = [t for t in ax.get_xticks() if 1 <= t <= 3]
    assert ticks == [1, 2, 3] and all(float(t).is_integer() for t in ax.get_xticks())


def test_a_confusion_matrix_names_model_data_and_split_normalised_by_true_class():
    ax = drawn(plot_confusion_matrix([0, 1, 1], [0, 1, 0], ["neg", "pos"], title="naive, pe=False on sst: val"))
    assert ax.get_title().startswith("naive, pe=False on sst: val\n")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["neg", "pos"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["neg", "pos"]
    np.testing.assert_allclose(ax.images[0].get_array(), [[1, 0], [0.5, 0.5]])  # rows sum to 1


def test_a_confusion_matrix_of_many_classes_stays_readable():
    names = [f"newsgroup.topic.{i}" for i in range(25)]
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 25, 500).tolist()
    figure = plot_confusion_matrix(labels, labels, names, title="efficient on 20ng: test")
    ax = drawn(figure)
    assert [t.get_text() for t in ax.get_yticklabels()] == names  # every name, on both axes
    assert [t.get_text() for t in ax.get_xticklabels()] == names
    assert figure.get_size_inches()[1] >= 0.35 * 25  # room for 25 rows of labels
    assert not ax.texts  # no 625 numbers crammed into the cells


def test_cells_show_their_numbers_up_to_12_classes():
    for n, shown in ((12, True), (13, False)):
        labels = list(range(n)) * 2
        ax = drawn(plot_confusion_matrix(labels, labels[1:] + labels[:1], [f"c{i}" for i in range(n)]))
        assert len(ax.texts) == (n * n if shown else 0), n


@pytest.mark.unit
def test_time_to_accuracy_is_the_training_time_of_the_first_epoch_to_reach_it():
    history = [{"val_accuracy": a, "elapsed_train_seconds": s} for a, s in ((0.80, 2.0), (0.91, 4.0), (0.89, 6.0),
                                                                            (0.96, 8.0))]
    assert time_to_accuracy(history, [0.85, 0.9, 0.95, 0.99]) == {"0.85": 4.0, "0.9": 4.0, "0.95": 8.0, "0.99": None}
    # Reaching a level is getting to it: 0.8 exactly (4 of 5 texts) counts.
    assert time_to_accuracy(history, [0.8])["0.8"] == 2.0


def test_a_class_absent_from_a_small_split_is_still_reported_and_counts_in_macro_f1(tmp_path):
    """The classes are the training split's: one that a small validation split lacks (neither label nor prediction)
    still gets its row, with support 0, and scores 0 in the macro average (scikit-learn's, over every class)."""
    labels, predictions, names = [0, 0, 1, 1], [0, 1, 1, 1], ["earn", "acq", "grain"]
    metrics = split_report(tmp_path, "val", labels, predictions, 0.5, names)
    report = json.loads((tmp_path / "classification_report_val.json").read_text())
    assert report["grain"]["support"] == 0 and "grain" in (tmp_path / "classification_report_val.txt").read_text()
    assert metrics.macro_f1 == pytest.approx(f1_score(labels, predictions, labels=[0, 1, 2], average="macro",
                                                      zero_division=0))
    assert metrics.macro_f1 < f1_score(labels, predictions, average="macro")  # (so that leaving grain out would show)
    assert (metrics.accuracy, metrics.n_samples, metrics.loss) == (0.75, 4, 0.5)


@pytest.mark.unit
def test_history_csv_has_its_columns_in_their_order(tmp_path):
    """history.csv holds HISTORY_COLUMNS in that order (a script reading it by position, `cut -d, -f3` for the
    validation loss, relies on it), whether the file grows epoch by epoch or is rewritten from last.pt; each value in
    its own column, and nothing else."""
    documented = list(HISTORY_COLUMNS)
    assert documented[:4] == ["epoch", "train_loss", "val_loss", "val_accuracy"]
    rows = [{name: 10 * epoch + i for i, name in enumerate(documented)} | {"epoch": epoch} for epoch in (1, 2)]
    for row in rows:
        append_history(tmp_path / "appended.csv", {**row, "not a column": 0})
    write_history(tmp_path / "rewritten.csv", rows)
    for name in ("appended.csv", "rewritten.csv"):
        with (tmp_path / name).open() as f:
            header, *lines = list(csv.reader(f))
        assert header == documented
        assert [[float(v) for v in line] for line in lines] == [[float(row[c]) for c in documented] for row in rows]
