"""pages/: report.html and summary.html. What a page shows of a folder (what it lacks too), that it never breaks a run,
that its tables are summary.md's own; and the pages of a real sweep, a real run and a failed run opened in a real
browser (headless Chromium): no console error, no request off the file system, every image decoded, the headline
numbers equal summary.csv's, nothing wider than a phone."""

import json
import logging
import os
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from conftest import capture_figures, optional, require, run_train, write_jsonl
from mha_textclf.pages import render
from mha_textclf.pages.run import write_run_page
from mha_textclf.pages.sweep import write_sweep_page
from mha_textclf.runs import lifecycle
from mha_textclf.sweeps.collect import groups_table, runs_table
from mha_textclf.sweeps.markdown import answers
from sweep_fakes import fake_run

TINY = ["data.max_train_samples=32", "trainer.epochs=2", "data.max_length=128", "probes.attention=[how are you]"]
PHONE = 390  # CSS pixels: a phone's width


class Tables(HTMLParser):
    """Every <table> of a page as rows of cell texts (header row first), by its id."""

    def __init__(self, page: str):
        super().__init__()
        self.tables, self.current, self.cell = {}, None, None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.current = self.tables.setdefault(dict(attrs).get("id") or f"#{len(self.tables)}", [])
        elif tag == "tr" and self.current is not None:
            self.current.append([])
        elif tag in ("td", "th") and self.current is not None:
            self.cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.current[-1].append(self.cell.strip())
            self.cell = None
        elif tag == "table":
            self.current = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def records(table: list[list[str]]) -> list[dict[str, str]]:
    header, *rows = table
    return [dict(zip(header, row, strict=True)) for row in rows]


@pytest.mark.unit
def test_a_run_folder_from_an_older_version_gets_the_page_of_what_it_has_and_the_list_of_what_it_lacks(tmp_path):
    run = tmp_path / "run"
    fake_run(run, accuracy=0.75)  # metrics.json, config.yaml, history.csv: no reports, no errors.csv, no figures
    page = write_run_page(run)
    assert page.path == run / "report.html"
    assert {name for name, _ in page.missing} == {
        "loss_curve.png", "confusion_matrix_val.png", "confusion_matrix_test.png", "reliability.png", "errors.csv",
        "classification_report_val.json", "classification_report_test.json"}
    html = page.path.read_text()
    headline = records(Tables(html).tables["headline-table"])
    assert [(row["split"], row["accuracy"], row["ECE"]) for row in headline] == [("val", "0.7500", ""),
                                                                                 ("test", "0.7500", "")]
    assert 'id="missing"' in html and "<code>errors.csv</code>" in html


@pytest.mark.unit
def test_a_failed_run_shows_its_state_and_what_went_wrong(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("model: {attention: naive}\npe: false\nseed: 3\ndata: {path: /data/x}\n")
    lifecycle.mark(run, lifecycle.FAILED, message="UserError: the train split has a single class")
    (run / "error.txt").write_text("The train split of '/data/x' has a single class (0).\n")
    page = write_run_page(run)
    html = page.path.read_text()
    assert 'id="state">failed<' in html and "has a single class (0)." in html
    assert ("metrics.json", "the run has not finished its reports (still running, cut short or failed)") in \
        page.missing


@pytest.mark.unit
def test_a_run_refused_before_it_claimed_its_folder_reads_as_failed(tmp_path):
    """No status.json (a baseline keeps none; a run refused at the start writes only error.txt)."""
    (tmp_path / "error.txt").write_text("data.path=/nowhere does not exist\n")
    html = write_run_page(tmp_path).path.read_text()
    assert 'id="state">failed<' in html and "data.path=/nowhere does not exist" in html


@pytest.mark.unit
def test_a_run_stopped_by_a_signal_says_how_to_continue_it_in_its_folder(tmp_path):
    """Not "the same command" alone: a single run's folder is dated, so that would start another."""
    (tmp_path / "status.json").write_text(json.dumps({"state": "interrupted", "interrupted_by": "SIGINT",
                                                      "epochs_done": 3}))
    html = " ".join(write_run_page(tmp_path).path.read_text().split())
    assert "after 3 epochs, stopped by SIGINT: run the same command again into its folder (hydra.run.dir=&lt;the " \
           "folder&gt;; a sweep&#39;s job: the sweep&#39;s command with hydra.sweep.dir=&lt;the sweep folder&gt;) to " \
           "continue it" in html


@pytest.mark.unit
def test_a_file_this_version_cannot_read_is_listed_and_the_rest_of_the_page_is_written(tmp_path):
    run = tmp_path / "run"
    fake_run(run, accuracy=0.75)
    (run / "errors.csv").write_text("split,position,text\nval,1,no confidence column\n")
    (run / "order_probe.json").write_text(json.dumps({"texts": ["a b"], "probabilities": {"a b": 0.3}}))
    (run / "classification_report_val.json").write_text(json.dumps({"a": {"precision": 0.5}}))
    page = write_run_page(run)
    unreadable = {name for name, why in page.missing if why.startswith("unreadable")}
    assert unreadable == {"errors.csv", "order_probe.json", "classification_report_val.json"}
    assert records(Tables(page.path.read_text()).tables["headline-table"])[1]["accuracy"] == "0.7500"


@pytest.mark.unit
def test_a_sweep_page_that_cannot_be_made_leaves_the_rest_of_the_summary(tmp_path, monkeypatch, caplog):
    from mha_textclf.pages import sweep
    from mha_textclf.sweeps.summary import write_summary

    fake_run(tmp_path / "run_0")

    def broken(*args, **kwargs):
        raise RuntimeError("no page today")

    monkeypatch.setattr(sweep, "write_sweep_page", broken)
    capture_figures(monkeypatch, write=False)
    with caplog.at_level(logging.WARNING):
        paths = write_summary(tmp_path)
    assert "summary.html" not in paths and (tmp_path / "summary.md").is_file() and "no page today" in caplog.text
    assert (tmp_path / "run_0" / "report.html").is_file()  # a run without a page gets one, for the sweep's links


@pytest.mark.unit
def test_texts_and_class_names_from_the_corpus_are_shown_as_written_never_run_as_html(tmp_path):
    run = tmp_path / "run"
    fake_run(run)
    text = '<script>alert("x")</script> & <b>bold</b>'
    (run / "errors.csv").write_text(pd.DataFrame([{"split": "test", "position": 3, "text": text, "true": "<a>",
                                                   "predicted": "b", "confidence": 0.9, "runner_up": "<a>"}])
                                    .to_csv(index=False))
    html = write_run_page(run).path.read_text()
    assert "<script>" not in html and "<b>" not in html and "<a>" not in html
    [row] = records(Tables(html).tables["errors-table"])
    assert row["text"] == text and row["true"] == "<a>"  # the browser shows the characters themselves


@pytest.mark.unit
def test_a_page_that_cannot_be_made_is_a_warning_and_never_an_exception(tmp_path, monkeypatch, caplog):
    fake_run(tmp_path / "run")

    def broken(*args, **kwargs):
        raise RuntimeError("template engine gone")

    monkeypatch.setattr(render, "render", broken)
    with caplog.at_level(logging.WARNING):
        assert write_run_page(tmp_path / "run") is None
    assert "could not write" in caplog.text and "template engine gone" in caplog.text
    assert not (tmp_path / "run" / "report.html").exists()


@pytest.mark.unit
def test_the_sweep_page_shows_summary_mds_own_tables_and_links_each_run_to_its_page(tmp_path):
    for model, accuracy in (("efficient", 0.8), ("naive", 0.7)):
        for seed in (0, 1):
            fake_run(tmp_path / f"{model}_{seed}", model=model, seed=seed, accuracy=accuracy + 0.01 * seed)
    write_run_page(tmp_path / "naive_1")
    runs = runs_table(tmp_path)
    groups = groups_table(runs)
    found = answers(tmp_path, runs, groups)
    tables = Tables(write_sweep_page(tmp_path, runs, groups, found).read_text()).tables
    assert records(tables["headline-1"]) == found[0].variants.astype(str).to_dict("records")
    linked = [row["run folder"] for row in records(tables["runs-table"])]
    assert sorted(linked) == sorted(runs["run_dir"])
    html = (tmp_path / "summary.html").read_text()
    assert 'href="naive_1/report.html"' in html and 'href="naive_0/report.html"' not in html  # only pages that exist


# The browser tests: a real sweep, a run of it and a failed run, opened in headless Chromium.

def chromium_path() -> str | None:
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium from the system's packages (apt-get install chromium; .ci/run installs it), driven by
    Playwright. Where none can start the tests skip, and fail under CI."""
    sync_api = optional("playwright.sync_api", "dev")
    path = chromium_path()
    require(path is not None, "no Chromium to open the pages in: apt-get install chromium")
    with sync_api.sync_playwright() as playwright:
        try:
            chromium = playwright.chromium.launch(executable_path=path)
        except sync_api.Error as e:
            require(False, f"Chromium did not start: {e}")
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def folders(data_dir, tmp_path_factory):
    """A real sweep (two variants, two seeds each) and a run that failed (a corpus of one class)."""
    sweep = tmp_path_factory.mktemp("pages") / "sweep"
    result = run_train("-m", "model=naive,efficient", "seed=0,1", *TINY, f"hydra.sweep.dir={sweep}",
                       data_dir=data_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    one_class = write_jsonl(tmp_path_factory.mktemp("one-class"), {
        split: [{"text": f"text number {i}", "label": 0} for i in range(8)] for split in ("train", "test")})
    failed = sweep.parent / "failed"
    result = run_train("data=own", f"data.path={one_class}", f"hydra.run.dir={failed}", data_dir=data_dir)
    assert result.returncode == 2, result.stderr[-3000:]
    return sweep, failed


def open_page(browser, path: Path, width: int) -> tuple[object, list[str]]:
    """The page at `path` in a window `width` CSS pixels wide, and every problem seen while it loaded: console
    errors, script errors, and requests that leave the file system."""
    page = browser.new_page(viewport={"width": width, "height": 800})
    problems = []
    page.on("console", lambda message: problems.append(f"console {message.type}: {message.text}")
            if message.type in ("error", "warning") else None)
    page.on("pageerror", lambda error: problems.append(f"script error: {error}"))
    page.on("request", lambda request: problems.append(f"request to {request.url}")
            if not request.url.startswith(("file:", "data:")) else None)
    page.goto(path.as_uri(), wait_until="load")
    return page, problems


def check_page(browser, path: Path) -> object:
    """Opened at a phone's width and a laptop's: no problem, every image decoded, nothing wider than the window
    (a wide table scrolls inside its own box)."""
    for width in (PHONE, 1280):
        page, problems = open_page(browser, path, width)
        images = page.evaluate("[...document.images].map(i => [i.alt, i.complete && i.naturalWidth > 0])")
        widths = page.evaluate("[document.documentElement.scrollWidth, document.body.scrollWidth]")
        assert problems == [], f"{path.name} at {width}px: {problems}"
        assert all(decoded for _, decoded in images), f"{path.name}: images that do not decode: {images}"
        assert max(widths) <= width, f"{path.name} is {max(widths)}px wide in a {width}px window"
        if width == PHONE:
            phone = page
        else:
            page.close()
    return phone


@pytest.mark.slow
def test_the_sweep_page_opens_offline_and_its_headline_numbers_are_summary_csvs(browser, folders):
    sweep, _ = folders
    page = check_page(browser, sweep / "summary.html")
    assert page.evaluate("document.images.length") >= 5  # ratios, accuracy per seed, loss, memory, accuracy/time
    summary = pd.read_csv(sweep / "summary.csv")
    headline = page.evaluate("""[...document.querySelectorAll('#headline-1 tr')].map(
        tr => [...tr.children].map(cell => cell.textContent.trim()))""")
    rows = records(headline)
    assert sorted(row["model"] for row in rows) == ["efficient", "naive"]
    for row in rows:
        runs = summary[summary["model"] == row["model"]]
        assert int(row["runs"]) == len(runs) == 2
        for column, name in (("test accuracy", "test_accuracy"), ("val accuracy", "val_accuracy"),
                             ("test macro-F1", "test_macro_f1")):
            assert row[column] == f"{runs[name].mean():.4f} ± {runs[name].std():.4f}"
    # Every run is linked to its own page, and the link opens it.
    links = page.evaluate("[...document.querySelectorAll('#runs-table a')].map(a => a.href)")
    assert len(links) == 4 and all(link.endswith("/report.html") for link in links)
    page.click("#runs-table a")
    page.wait_for_load_state()
    assert page.url == links[0] and page.locator("#state").inner_text() == "finished"
    page.close()


@pytest.mark.slow
def test_a_run_page_answers_what_went_wrong_and_how_far_to_trust_it(browser, folders):
    sweep, _ = folders
    run = next(p.parent for p in sorted(sweep.glob("*/report.html")))
    page = check_page(browser, run / "report.html")
    metrics = json.loads((run / "metrics.json").read_text())
    headline = records(page.evaluate("""[...document.querySelectorAll('#headline-table tr')].map(
        tr => [...tr.children].map(cell => cell.textContent.trim()))"""))
    for row in headline:
        split = metrics[row["split"]]
        assert row["accuracy"] == f"{split['accuracy']:.4f}"
        assert row["ECE"] == f"{metrics['calibration'][row['split']]['ece']:.4f}"
    errors = pd.read_csv(run / "errors.csv")
    shown = page.evaluate("document.querySelectorAll('#errors-table tbody tr').length")
    assert shown == min(len(errors), 25) and shown > 0
    first = page.evaluate("[...document.querySelector('#errors-table tbody tr').children].map(c => c.textContent)")
    assert float(first[4]) == errors["confidence"].max()  # the most confident mistake first
    # Every figure the folder holds is on the page: loss, 2 confusion matrices, reliability, the attention map.
    assert page.evaluate("document.images.length") == len(list(run.glob("*.png"))) == 5
    page.close()


@pytest.mark.slow
def test_a_failed_run_page_says_what_went_wrong(browser, folders):
    _, failed = folders
    page = check_page(browser, failed / "report.html")
    assert page.locator("#state").inner_text() == "failed"
    assert "a single class" in page.locator(".notice.bad").inner_text()
    page.close()
