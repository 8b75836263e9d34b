"""runs/files.py: the one atomic write every file goes through, and the readers of a run folder's files."""

import threading

import pytest

from mha_textclf.runs import files

pytestmark = pytest.mark.unit


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "metrics.json"
    files.write_json(path, {"epoch": 1})

    def half_then_fail(tmp):
        tmp.write_text('{"epo')
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        files.write_atomically(path, half_then_fail)
    assert path.read_text() == '{\n  "epoch": 1\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_nothing_is_written_under_the_final_name_before_it_is_whole(tmp_path):
    path = tmp_path / "summary.md"
    seen = []
    files.write_atomically(path, lambda tmp: seen.append((tmp, path.exists())) or tmp.write_text("whole"))
    ((tmp, existed),) = seen
    assert not existed and tmp.parent == tmp_path and tmp.name.startswith(".summary.md.") and tmp.suffix == ".tmp"
    assert path.read_text() == "whole" and not tmp.exists()


def test_writers_of_one_file_never_share_a_temporary(tmp_path):
    """Two writers at once (threads here; workers of one study, jobs filling one cache): each writes its own
    temporary, and the file ends as one of them wrote it, whole."""
    path, temporaries, both_writing = tmp_path / "best.json", [], threading.Barrier(2)

    def write(text):
        def slowly(tmp):
            temporaries.append(tmp)
            both_writing.wait(timeout=10)
            tmp.write_text(text)

        files.write_atomically(path, slowly)

    threads = [threading.Thread(target=write, args=(text,)) for text in ("first" * 1000, "second" * 1000)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(temporaries)) == 2
    assert path.read_text() in ("first" * 1000, "second" * 1000)
    assert [p.name for p in tmp_path.iterdir()] == ["best.json"]


def test_a_folder_replaces_no_folder_that_is_there_and_leaves_no_temporary(tmp_path):
    """The tokenizer cache's entries are folders: the second writer of one finds it there and keeps the first's."""
    entry = tmp_path / "wordpiece-1000-abc"
    files.write_atomically(entry, lambda tmp: (tmp.mkdir(), (tmp / "tokenizer.json").write_text("first")))
    with pytest.raises(OSError):
        files.write_atomically(entry, lambda tmp: (tmp.mkdir(), (tmp / "tokenizer.json").write_text("second")))
    assert (entry / "tokenizer.json").read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == [entry.name]


def test_what_a_killed_writer_left_is_removed_and_nothing_else(tmp_path):
    (tmp_path / ".last.pt.123-abcdef12.tmp").write_bytes(b"half a checkpoint")
    (tmp_path / ".tokenizer.123-abcdef12.tmp").mkdir()
    (tmp_path / "last.pt").write_bytes(b"a whole one")
    (tmp_path / ".lock").touch()
    files.remove_temporaries(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", "last.pt"]


def test_the_readers_say_nothing_is_there_rather_than_fail(tmp_path):
    assert files.read_config(tmp_path) is None and files.read_status(tmp_path) == {}
    assert files.read_history(tmp_path) is None
    (tmp_path / files.CONFIG).write_text("model: [unclosed")
    (tmp_path / files.STATUS).write_text('{"state": ')
    assert files.read_config(tmp_path) is None and files.read_status(tmp_path) == {}


def test_a_run_that_wrote_no_config_yet_is_read_from_hydras_record_where_asked(tmp_path):
    (tmp_path / files.HYDRA).mkdir()
    (tmp_path / files.HYDRA / files.CONFIG).write_text("seed: 3\n")
    assert files.read_config(tmp_path) is None
    assert files.read_config(tmp_path, hydra_fallback=True) == {"seed": 3}
    files.write_text(tmp_path / files.CONFIG, "seed: 4\n")
    assert files.read_config(tmp_path, hydra_fallback=True) == {"seed": 4}


def test_overwrite_deletes_config_yaml_first_and_never_the_log_or_a_job_record():
    """A kill while a folder is cleared leaves a folder without config.yaml: one that reads as new."""
    assert files.RUN_FILES[0] == files.CONFIG
    assert files.TRAIN_LOG not in files.RUN_FILES and files.JOB not in files.RUN_FILES
    assert {files.METRICS, files.MODEL, files.LAST, files.HISTORY} <= set(files.RUN_FILES)
