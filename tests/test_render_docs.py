"""scripts/render_docs.py: the facts the docs show from code and measurements, rendered into marked blocks; --check
fails where a block is not what the script renders."""

import shutil

import pytest

from conftest import REPO, load_script


@pytest.fixture
def render(monkeypatch):
    return load_script("render_docs", monkeypatch)


@pytest.fixture
def pages_copy(render, monkeypatch, tmp_path):
    """The README and docs/ copied, and the script pointed at the copies (its renderers still read the code)."""
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    monkeypatch.setattr(render, "pages", lambda: [tmp_path / "README.md", *sorted((tmp_path / "docs").glob("*.md"))])
    monkeypatch.setattr(render, "RESULTS", tmp_path / "docs" / "results")
    return tmp_path


def test_every_rendered_block_is_what_the_script_renders(render):
    """The docs in this commit: every block current. Where this fails, run python scripts/render_docs.py and commit."""
    assert render.check() == []


def test_a_hand_edited_block_fails_the_check_and_rendering_puts_it_back(render, pages_copy, capsys):
    page = pages_copy / "docs" / "runs.md"
    original = page.read_text()
    page.write_text(original.replace("| `seed` | integer |", "| `seed` | string |"))
    assert render.main(["--check"]) == 1
    assert "docs/runs.md" in capsys.readouterr().err
    assert render.main([]) == 0 and page.read_text() == original
    assert render.main(["--check"]) == 0


def test_text_outside_the_blocks_is_the_writers_and_stays(render, pages_copy):
    page = pages_copy / "docs" / "configuration.md"
    page.write_text(page.read_text().replace("# Settings and configuration", "# Settings, reworded"))
    assert render.check() == []


def test_a_block_no_renderer_knows_is_named_with_those_it_knows(render, pages_copy):
    page = pages_copy / "README.md"
    page.write_text(page.read_text() + "\n<!-- begin: nothing:here (rendered by scripts/render_docs.py) -->\n"
                    "<!-- end: nothing:here -->\n")
    (problem,) = render.check()
    assert "README.md: nothing:here: no such block" in problem and "settings:train" in problem


def test_a_setting_s_row_is_its_default_meaning_and_range_as_help_shows_them(render):
    from mha_textclf.checks import help_table
    from mha_textclf.settings import TrainSettings

    table = render.settings_table("train")
    row = next(line for line in table.splitlines() if line.startswith("| `trainer.lr` |"))
    meaning = "AdamW's peak learning rate (and that of the lazy Adam a bigram table learns with)"
    assert row.startswith(f"| `trainer.lr` | `0.003` | {meaning} | range >0 |")
    assert f"{meaning}; range >0" in " ".join(help_table(TrainSettings).split())
    device = next(line for line in table.splitlines() if line.startswith("| `device` |"))
    assert "auto (CUDA when available) \\| cpu \\| cuda \\| cuda:N" in device  # a | stays in its cell
