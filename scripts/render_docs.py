"""Render the facts the docs show from the code and the measurements that decide them, into marked blocks of README.md
and docs/*.md: the settings with their defaults and meanings, the rules that adapt to a corpus, a run folder's files,
metrics.json's keys, the module map, and the result tables.

    python scripts/render_docs.py                   # rewrite every block from what it shows
    python scripts/render_docs.py --check           # exit 1, naming each block that differs (the tests run this)
    python scripts/render_docs.py --results default-sweep=outputs/multirun/<sweep>   # record a sweep's answer in
                                                    # docs/results/default-sweep.json, then render

A block is written between two markers, and only there:

    <!-- begin: NAME (rendered by scripts/render_docs.py) -->
    ...
    <!-- end: NAME -->

Facts from code come from the code itself; result tables come from docs/results/*.json, each the tables a sweep's
own summary computed (`--results`), so a table in the docs is the table summary.md shows.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import sys
import textwrap
import typing
from dataclasses import fields, is_dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"
CORPORA = "corpora"  # the results name whose folder holds every corpus's sweeps and baselines (sweeps/corpora.py)
BLOCK = re.compile(r"(<!-- begin: (?P<name>[\w:-]+) \(rendered by scripts/render_docs\.py\) -->\n)(?P<body>.*?)"
                   r"(<!-- end: (?P=name) -->)", re.DOTALL)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """The table as summary.md writes its own (sweeps/markdown.py)."""
    import pandas as pd

    from mha_textclf.sweeps import markdown

    return markdown.markdown_table(pd.DataFrame(rows, columns=header))


def settings_table(app: str) -> str:
    """Every setting of `python -m <app>`: its default, meaning and valid values, as --help lists them."""
    from mha_textclf.checks import help_rows
    from mha_textclf.cli import SCHEMAS

    rows = [[f"`{key}`", f"`{default}`", meaning, valid] for key, default, meaning, valid in help_rows(SCHEMAS[app])]
    return markdown_table(["setting", "default", "meaning", "valid values"], rows)


def requirements() -> str:
    """The Python and torch that pyproject.toml asks for."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (torch,) = [r for r in project["dependencies"] if re.match(r"torch\b", r)]
    return f"The project asks for Python `{project['requires-python']}` and `{torch}` (pyproject.toml)."


def bbc_defaults() -> str:
    """What `python -m train` trains on bbc-news when nothing is set, in words."""
    from mha_textclf import cli
    from mha_textclf.settings import show

    s = cli.compose_settings("train", [])
    t, m = s.trainer, s.model
    attention = "the [CLS] query alone (cls_only)" if m.cls_only else "full attention over the visible tokens"
    bigrams = (f"hashed bigrams in {m.bigram_buckets:,} buckets (learnt by lazy Adam)" if m.bigram_buckets
               else "no hashed bigrams")
    return textwrap.fill(
        f"`model={m.attention}`, `pe={show(s.pe)}`: {t.epochs} epochs, batch {t.batch_size}, AdamW lr {show(t.lr)} "
        f"(weight decay {show(t.weight_decay)}) with a {show(t.warmup_epochs)}-epoch warm-up and {t.schedule} decay, "
        f"{m.d_model} dimensions and {m.n_heads} heads, token dropout {show(m.token_dropout)}, {bigrams}, `max_length` "
        f"{s.data.max_length}, {attention}, {'length-grouped' if s.data.group_by_length else 'shuffled'} batches, a "
        f"{s.tokenizer.vocab_size}-token WordPiece vocabulary, the {s.trainer.final_weights} epoch reported.",
        width=118, break_on_hyphens=False)


def by_length_rule() -> str:
    """The settings a corpus of long texts changes, and the threshold; and what the classes' size decides."""
    from mha_textclf.settings import BY_TEXT_LENGTH, CLASS_VIEWS, LONG_TEXT, MIN_EPOCHS, RDROP, RDROP_CLASS_SIZE, show

    rows = [[f"`{key}`", show(short), show(long)] for key, (short, long) in BY_TEXT_LENGTH.items()]
    header = ["setting left null", "most corpora", f"median training text of {LONG_TEXT} tokens or more"]
    return (markdown_table(header, rows) + "\n\nThe median counts `[CLS]` and `[SEP]` and cuts each text at "
            "`data.max_length`, as the model sees it. `trainer.epochs` then takes no more passes than show each class "
            f"about {CLASS_VIEWS:,} training texts on average, and at least {MIN_EPOCHS}: a corpus of n training texts "
            f"in k classes trains for min(epochs, max({MIN_EPOCHS}, round({CLASS_VIEWS:,} · k / n))) passes. "
            f"`trainer.rdrop` left null, whatever the texts' length, is {show(RDROP)} (R-Drop: each batch twice "
            f"through the model, the two predictions pulled together) where n / k is {RDROP_CLASS_SIZE:,} or more, "
            "else 0.")


MISTAKES = ["trainer.epoch=3", "trainer.warmup_epochs=abc", "+model.pe=true", "model.n_heads=5"]


def mistakes_example() -> str:
    """A command line with four mistakes, and the one message `python -m train` answers it with."""
    import contextlib
    import io

    from mha_textclf import cli

    printed = io.StringIO()
    with contextlib.redirect_stderr(printed), contextlib.suppress(SystemExit):
        cli.check_command_line("train", MISTAKES)
    return f"```\n$ python -m train {' '.join(MISTAKES)}\n{printed.getvalue()}```"


# Workers of one study as a Slurm job array: sbatch's options and the search's own arguments (tests/test_slurm.py runs
# exactly this, with two tasks, where a cluster is at hand).
SLURM_ARRAY_OPTIONS = ["--array=1-4", "--cpus-per-task=1", "--mem=4G", "--partition=<partition>", "--job-name=search",
                       "--output=outputs/search/%x-%A_%a.out"]
SLURM_ARRAY_ARGUMENTS = ["num_threads=1"]


def slurm_array_example() -> str:
    options = " ".join(SLURM_ARRAY_OPTIONS[:-1])
    return (f"```bash\nmkdir -p outputs/search && sbatch {options} \\\n  {SLURM_ARRAY_OPTIONS[-1]} "
            f"--wrap \"python -m search {' '.join(SLURM_ARRAY_ARGUMENTS)}\"\n```")


def by_length_log() -> str:
    """The line the rule logs for 20 Newsgroups, whose median training text has 195 tokens (docs/own-data.md)."""
    from mha_textclf.resolve import by_text_length

    decision = by_text_length([100, 195, 300], n_classes=20)["trainer.epochs"]
    return f"```\ntrainer.epochs={decision.value} (null: {decision.why})\n```"


def vocabulary_rule() -> str:
    """How large `tokenizer.vocab_size: null` makes the vocabulary."""
    from mha_textclf.settings import TokenizerSettings
    from mha_textclf.tokenizer.vocabulary import AUTO_CHARACTER_COVERAGE, AUTO_VOCAB_FLOOR
    from mha_textclf.tokenizer.wordpiece import ALPHABET_SHARE

    min_frequency = next(f.default for f in fields(TokenizerSettings) if f.name == "min_frequency")
    return textwrap.fill(f"`tokenizer.vocab_size: null` sizes the vocabulary by counting: a token for each word of "
            f"the training texts that occurs `tokenizer.min_frequency` ({min_frequency}) times or more, and for each "
            f"character (and its `##` form) that occurs as often or is among the most frequent that make up "
            f"{AUTO_CHARACTER_COVERAGE:.1%} of all of theirs; with room for the characters to take no more than "
            f"{ALPHABET_SHARE:.0%} of it, rounded up to hundreds, and at least {AUTO_VOCAB_FLOOR}. WordPiece then "
            f"merges the most frequent pairs first, and the pieces along the way take tokens too: the most frequent "
            f"words become tokens of their own, and many of those seen up to a few times {min_frequency} stay split.",
            width=118, break_on_hyphens=False)


def comparison_rules() -> str:
    """The rules summary.md prints under its comparisons."""
    from mha_textclf.sweeps.compare import RULES

    return textwrap.fill(RULES, width=118, break_on_hyphens=False)


def run_folder() -> str:
    """What a run folder holds, as a tree."""
    from mha_textclf.runs.files import RUN_FOLDER

    width = max(len(f.name) for f in RUN_FOLDER) + 6
    lines = ["outputs/runs/<date>_<time>_<model>_pe-<pe>/"]
    for i, f in enumerate(RUN_FOLDER):
        last = i == len(RUN_FOLDER) - 1
        wrapped = textwrap.wrap(f.holds, width=118 - width)
        lines.append(f"{'└── ' if last else '├── '}{f.name:<{width - 4}}{wrapped[0]}")
        lines += [f"{'    ' if last else '│   '}{'':<{width - 4}}{more}" for more in wrapped[1:]]
    return "```\n" + "\n".join(lines) + "\n```"


def metrics_keys() -> str:
    """metrics.json's keys, their types and what each holds."""
    from mha_textclf.runs.metrics import RunMetrics, SplitMetrics

    def json_type(kind) -> str:  # as JSON names it
        args = typing.get_args(kind)
        if typing.get_origin(kind) is dict:
            return f"object of {json_type(args[1])}"
        if typing.get_origin(kind) is list:
            return f"array of {json_type(args[0])}"
        if args:  # X | None
            return " or ".join(json_type(a) for a in args)
        names = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
        return names.get(kind, "object")

    def kind(owner, name: str) -> str:
        return json_type(typing.get_type_hints(owner)[name])

    rows = []
    for f in fields(RunMetrics):
        rows.append([f"`{f.name}`", kind(RunMetrics, f.name), f.metadata["about"]])
        if is_dataclass(typing.get_type_hints(RunMetrics)[f.name]):
            rows += [[f"`{f.name}.{s.name}`", kind(SplitMetrics, s.name), s.metadata["about"]]
                     for s in fields(SplitMetrics)]
    return markdown_table(["key", "type", "what it holds"], rows)


def module_map() -> str:
    """One line per module of the entry points, the package and the scripts: what its docstring says first."""
    paths = [*sorted((REPO / "src").glob("*.py")), *sorted((REPO / "src" / "mha_textclf").rglob("*.py")),
             *sorted((REPO / "scripts").glob("*.py"))]
    rows = []
    for path in paths:
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        first = " ".join(doc.split("\n\n")[0].split())
        sentence = re.split(r"(?<=\.)\s+(?=[A-Z`(])", first)[0]
        rows.append([f"`{path.relative_to(REPO)}`", sentence])
    return markdown_table(["module", "what it is"], rows)


def sweep_time(name: str) -> str:
    """How long the sweep recorded as docs/results/<name>.json took, by its own clock, and on what."""
    recorded = json.loads((RESULTS / f"{name}.json").read_text())
    return (f"All {recorded['runs']} runs took {recorded['sweep_seconds']:.0f} s, one after another, by the sweep's "
            f"own clock (`sweep.json`; device: {', '.join(recorded['device'])}).")


def result_table(name: str, table: str) -> str:
    """A table a sweep's summary computed, as docs/results/<name>.json recorded it."""
    recorded = json.loads((RESULTS / f"{name}.json").read_text())["tables"][table]
    return markdown_table(recorded["columns"], recorded["rows"])


def renderers() -> dict[str, callable]:
    found = {f"settings:{app}": (lambda app=app: settings_table(app)) for app in ("train", "predict", "baseline",
                                                                                 "search", "export")}
    found |= {"requirements": requirements, "defaults:bbc-news": bbc_defaults, "rule:by-length": by_length_rule,
              "rule:vocabulary": vocabulary_rule, "example:by-length-log": by_length_log,
              "example:mistakes": mistakes_example, "example:slurm-array": slurm_array_example,
              "rules:comparison": comparison_rules, "run-folder": run_folder, "metrics-json": metrics_keys,
              "modules": module_map}
    for path in sorted(RESULTS.glob("*.json")):
        recorded = json.loads(path.read_text())
        if recorded.get("sweep_seconds") is not None:
            found[f"results:{path.stem}:time"] = lambda name=path.stem: sweep_time(name)
        for table in recorded["tables"]:
            found[f"results:{path.stem}:{table}"] = lambda name=path.stem, table=table: result_table(name, table)
    return found


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def shown(page: Path) -> str:
    """README.md, docs/runs.md: a page as the repository names it."""
    return page.name if page.parent.name != "docs" else f"docs/{page.name}"


def render(text: str, known: dict[str, callable], where: str) -> tuple[str, list[str]]:
    """`text` with every block rendered afresh, and the names of blocks that no renderer knows."""
    unknown = []

    def fill(match: re.Match) -> str:
        name = match["name"]
        if name not in known:
            unknown.append(f"{where}: {name}")
            return match[0]
        return f"{match[1]}{known[name]()}\n{match[4]}"

    return BLOCK.sub(fill, text), unknown


def check() -> list[str]:
    """What differs between the pages and their blocks rendered afresh, as unified diffs (empty: all current)."""
    known, differences = renderers(), []
    for page in pages():
        text = page.read_text()
        rendered, unknown = render(text, known, shown(page))
        differences += [f"{u}: no such block (scripts/render_docs.py renders {', '.join(sorted(known))})"
                        for u in unknown]
        if rendered != text:
            differences.append("".join(difflib.unified_diff(
                text.splitlines(keepends=True), rendered.splitlines(keepends=True),
                f"{shown(page)} (as it is)", f"{shown(page)} (rendered)", n=1)))
    return differences


def record_results(name: str, folder: Path) -> Path:
    """docs/results/<name>.json: the answer a sweep's summary gives for its dataset (the tables of summary.md's
    "The answer" section), or, recorded as `corpora`, the corpora table of a folder of runs on every corpus with
    their TF-IDF baselines (sweeps/corpora.py); and where it came from."""
    from mha_textclf.sweeps.collect import groups_table, runs_table
    from mha_textclf.sweeps.corpora import corpora_table
    from mha_textclf.sweeps.markdown import answer
    from mha_textclf.sweeps.record import SweepRecord

    runs = runs_table(folder)
    groups = groups_table(runs)
    datasets = list(groups["dataset"].drop_duplicates()) if not groups.empty else []
    if not datasets:
        raise SystemExit(f"{folder}: no finished runs")
    if name != CORPORA and len(datasets) != 1:
        raise SystemExit(f"{folder}: a sweep of one dataset is needed (found {datasets}); for several corpora with "
                         f"their baselines, record them as --results {CORPORA}=<folder>")
    if name == CORPORA:
        try:
            tables = {"corpora": corpora_table(folder, runs)}
        except ValueError as e:
            raise SystemExit(f"{folder}: {e}") from e
    else:
        found = answer(folder, runs, groups, datasets[0])
        tables = {"variants": found.variants} | ({"against": found.against} if found.against is not None else {}) | (
            {"pe": found.pe} if found.pe is not None else {})
    sweep = SweepRecord.read(folder)
    recorded = {
        "dataset": datasets if name == CORPORA else datasets[0], "runs": len(runs),
        "sweep_seconds": sweep.wall_seconds if sweep else None, "device": sorted(set(runs["device"].dropna())),
        "tables": {key: {"columns": [str(c) for c in frame.columns],
                         "rows": [["" if v is None or v != v else str(v) for v in row]
                                  for row in frame.itertuples(index=False)]}
                   for key, frame in tables.items()},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(dump_results(recorded))
    return path


def dump_results(recorded: dict) -> str:
    """JSON with a table's row on one line, so that a changed number shows as one changed line."""
    text = json.dumps(recorded, indent=1, ensure_ascii=False)
    return re.sub(r"\[\n\s+((?:\"(?:[^\"\\]|\\.)*\",?\s*)+)\]",
                  lambda m: json.dumps(json.loads(f"[{m[1]}]"), ensure_ascii=False), text) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 where a block is not current")
    parser.add_argument("--results", action="append", default=[], metavar="NAME=FOLDER",
                        help="record the answer of the sweep in FOLDER as docs/results/NAME.json first")
    args = parser.parse_args(argv)
    for spec in args.results:
        name, _, folder = spec.partition("=")
        if not name or not folder or not Path(folder).is_dir():
            parser.error(f"--results {spec}: give NAME=FOLDER, FOLDER a sweep folder")
        print(f"recorded {record_results(name, Path(folder))}")
    if args.check:
        differences = check()
        for difference in differences:
            print(difference, file=sys.stderr)
        if differences:
            print("Rendered blocks are not current: run python scripts/render_docs.py (and commit what it writes).",
                  file=sys.stderr)
        return 1 if differences else 0
    known = renderers()
    for page in pages():
        text = page.read_text()
        rendered, unknown = render(text, known, shown(page))
        for name in unknown:
            print(f"{name}: no such block", file=sys.stderr)
        if rendered != text:
            page.write_text(rendered)
            print(f"rendered {shown(page)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
