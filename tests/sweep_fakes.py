"""Fakes shared by the tests of sweeps/: a finished run folder as train writes it (fake_run), a metrics.json
edited in place (edit_metrics), and summary.md's tables read back (md_table)."""

import yaml

from mha_textclf.runs.files import write_history
from mha_textclf.runs.metrics import RunMetrics, SplitMetrics


def fake_run(folder, model="efficient", seed=0, accuracy=0.5, epoch_seconds=1.0, pe=False, dataset="bbc-news",
             test_accuracy=None, n_samples=10, epoch_times=None, losses=None, stages=None, adapted=None,
             val_samples=None, eval_times=None, **settings):
    """A finished run folder as train writes it: metrics.json, config.yaml (resolved settings), history.csv.

    `epoch_times` (seconds per epoch) and `losses` ((train, val) per epoch) default to two epochs of
    `epoch_seconds`, each followed by `eval_times` seconds of validation (0.1 each); history.csv has every column
    train writes. `stages` is metrics.json's record of the pipeline's stages (peak memory). Each split's macro-F1
    is its accuracy minus 0.1, so that a table showing one in place of the other shows it; `val_samples` gives
    validation a size of its own (default: `n_samples`, as test)."""
    folder.mkdir(parents=True)
    epoch_times = epoch_times or [epoch_seconds] * 2
    losses = losses or [(1.0, 1.1), (0.5, 0.9)][:len(epoch_times)] + [(0.5, 0.9)] * (len(epoch_times) - 2)
    test_accuracy = accuracy if test_accuracy is None else test_accuracy
    val = SplitMetrics(accuracy=accuracy, macro_f1=accuracy - 0.1, loss=1.0, n_samples=val_samples or n_samples)
    test = SplitMetrics(accuracy=test_accuracy, macro_f1=test_accuracy - 0.1, loss=1.0, n_samples=n_samples)
    RunMetrics(model=model, pe=pe, seed=seed, dataset=dataset, splits={}, train_samples=20, val=val, test=test,
               class_names=["a", "b"], params=10,
               train_seconds=sum(epoch_times), eval_seconds=0.1, epochs=len(epoch_times), best_epoch=2,
               stopped_early=False, interrupted_by=None, tokens_per_second=1000 / (sum(epoch_times) or 1),
               vocab_size=100, device="cpu", threads=1, stages=stages or {},
               adapted=adapted or {}).write(folder / "metrics.json")
    config = {"model": {"attention": model, "dropout": 0.0}, "seed": seed, "pe": False,
              "tokenizer": {"base": None, "cache_dir": f"/cache/of/{folder.name}"},
              "data": {"path": f"/data/{dataset}"}}
    for key, value in settings.items():
        group, name = key.split("__")
        config[group][name] = value
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    eval_times = eval_times or [0.1] * len(epoch_times)
    write_history(folder / "history.csv", [
        {"epoch": i, "train_loss": train, "val_loss": val, "val_accuracy": accuracy, "lr": 1e-3,
         "train_seconds": seconds, "eval_seconds": evaluation, "elapsed_train_seconds": sum(epoch_times[:i]),
         "train_tokens": 1000} for i, ((train, val), seconds, evaluation) in enumerate(
            zip(losses, epoch_times, eval_times, strict=True), start=1)])


def edit_metrics(run_dir, **changes):
    metrics = RunMetrics.read(run_dir / "metrics.json")
    for key, value in changes.items():
        setattr(metrics, key, value)
    metrics.write(run_dir / "metrics.json")


def md_table(text: str, heading: str) -> list[dict[str, str]]:
    """The first Markdown table after `heading` in summary.md, as one dict per row."""
    lines = text.split(heading, 1)[1].splitlines()
    rows = [line for line in lines[lines.index(next(x for x in lines if x.startswith("|"))):]]
    rows = rows[:next((i for i, x in enumerate(rows) if not x.startswith("|")), len(rows))]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    return [dict(zip(cells[0], row, strict=True)) for row in cells[2:]]
