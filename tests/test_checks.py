"""checks.py: every mistake a user can type is found, all at once, with the closest valid key (lookup,
check_value, problems and the rules between settings); --help lists every setting with its default,
meaning and range (help_table), and the table of ranges. In-process: the command-line check is called
as `python -m train` calls it."""

import dataclasses
import re

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import MISSING

from conftest import compose_config, settings_for
from mha_textclf import cli
from mha_textclf.checks import help_table, lookup, problems
from mha_textclf.errors import UserError
from mha_textclf.settings import DERIVED, PredictSettings, SearchSettings, TrainSettings, known_keys, show
from settings_fakes import command_line_problems

# (command line, what the message must say): one case per kind of mistake.
MISTAKES = [
    (["trainer.warmup_epochs=abc"], "trainer.warmup_epochs=abc: must be a number"),
    (["data.val_fraction=abc"], "data.val_fraction=abc: must be a number"),
    (["trainer.epochs=2.5"], "trainer.epochs=2.5: must be a whole number"),
    (["pe=maybe"], "pe=maybe: must be true or false"),
    (["trainer.epochs=0"], "trainer.epochs=0: must be > 0"),
    (["trainer.lr=0"], "trainer.lr=0: must be > 0"),
    (["trainer.batch_size=-1"], "trainer.batch_size=-1: must be > 0"),
    (["data.val_fraction=1.5"], "data.val_fraction=1.5: must be < 1"),
    (["data.max_train_samples=0"], "data.max_train_samples=0: must be > 0"),
    (["trainer.grad_clip=0"], "trainer.grad_clip=0: must be > 0"),
    (["trainer.warmup_epochs=-1"], "trainer.warmup_epochs=-1: must be ≥ 0"),
    (["model.token_dropout=1"], "model.token_dropout=1: must be < 1"),
    (["seed=-1"], "seed=-1: must be ≥ 0"),
    (["trainer.precision=fp16"], "trainer.precision=fp16: must be one of fp32, bf16"),
    (["trainer.schedule=step"], "trainer.schedule=step: must be one of constant, linear, cosine"),
    (["trainer.epoch=3"], "trainer.epoch is not a setting; did you mean trainer.epochs?"),
    (["+trainer.epoch=3"], "trainer.epoch is not a setting; did you mean trainer.epochs?"),
    (["+model.heads=4"], "model.heads is not a setting; did you mean model.n_heads?"),
    (["+trainer.anything=1"], "the trainer settings are epochs, batch_size, lr"),
    (["sed=1"], "sed is not a setting; did you mean seed?"),
    # An unknown key's message names the closest valid keys: a misspelling close to two keys names both, in its
    # group or without one.
    (["model.droput=0.1"], "model.droput is not a setting; did you mean model.dropout or model.mlp_dropout?"),
    (["token_dropout=0.5"], "token_dropout is not a setting; did you mean model.token_dropout or "
                            "model.token_dropout_keep?"),
    (["modle=naive"], "modle is not a setting or a config group; did you mean model=naive? (model: efficient, naive"),
    (["-m", "dat=bbc_news,reuters_r8"], "did you mean data=bbc_news,reuters_r8?"),
    (["+experimnet=smoke"], "did you mean experiment=smoke?"),
    (["+model.pe=true"], "model.pe is set by the pipeline from the top-level switch (use pe=true)"),
    (["+model.vocab_size=500"], "model.vocab_size is set by the pipeline from the trained tokenizer's size"),
    (["model.max_length=1024"], "model.max_length is set by the pipeline from data.max_length"),
    (["model.n_heads=5"], "model.n_heads=5: model.d_model=64 is not divisible by it"),
    # A width left null becomes 64 or 128 by the corpus: a head count must divide both.
    (["data=own", "data.path=x", "model.n_heads=3"], "model.d_model=64 (what null may become) is not divisible by"),
    (["model.d_model=63", "model.n_heads=1", "pe=true"], "pe=true needs an even model.d_model"),
    (["model.attention=naive"], "model.attention is chosen with model=naive|efficient|torch"),
    (["trainer=default"], "trainer is a group of settings, not a value or a config group"),
    (["lr=3e-3"], "lr is not a setting; did you mean trainer.lr?"),
    (["seed=1.0"], "seed=1.0: must be a whole number"),
    (["model=null"], "model=null: choose one of efficient, naive, torch"),
    (["experiment=null"], "or leave experiment out"),
    (["-m", "trainer.lr=interval(0,1)"], "interval(...) needs a sweeper that samples values"),
    (["-m", "pe=glob(*)"], "glob(...) picks options of a config group"),
    (["-m", "model.n_heads=5,8"], "model.n_heads=5: model.d_model=64 is not divisible by it"),
    # pe=true only comes from the experiment's own sweep (pe: true,false); the other swept keys are pinned here so
    # that 2 jobs are composed, not 72.
    (["-m", "experiment=search", "seed=0", "model.token_dropout=0.75", "trainer.lr=3e-3", "model.d_model=63",
      "model.n_heads=1"], "pe=true needs an even model.d_model"),
    (["model.d_model=abc", "model.n_heads=3"], "model.d_model=abc: must be a whole number"),  # and nothing else
    (["trainer.class_weights=weighted"], "trainer.class_weights=weighted: must be one of null, balanced"),
    (["data.text_column=[1,2]"], "data.text_column=[1,2]: must be a column name or a list of them"),
    (["data.test_fraction=0"], "data.test_fraction=0: must be > 0"),
    (["time_to_accuracy=[0.9,95]"], "time_to_accuracy=[0.9,95]: accuracies lie in (0,1], e.g. [0.9,0.95]."),
    (["time_to_accuracy=[0,0.5]"], "time_to_accuracy=[0,0.5]: accuracies lie in (0,1]"),
    # The shell expands ~ only at the start of a word: after key= it reaches Hydra, whose syntax refuses it.
    (["data=own", "data.path=~/data/r8"], "the shell expands ~ only at the start of a word, and Hydra's syntax "
                                          "refuses it here; write data.path=$HOME/data/r8."),
    (["-m", "data.path=../corpus,~/data/r8"], "write data.path=../corpus,$HOME/data/r8."),
    (["-m", "data.path=choice(~/a,~/b)"], "write data.path=choice($HOME/a,$HOME/b)."),
    (["data=own", "data.path=~someone/corpus"], "write 'data.path=\"~someone/corpus\"'."),
]


@pytest.mark.parametrize(("args", "message"), MISTAKES, ids=[" ".join(a) for a, _ in MISTAKES])
def test_every_mistake_is_named_with_what_to_change(args, message):
    found = command_line_problems(*args)
    assert len(found) == 1, found
    assert message in found[0]


def test_a_quoted_path_from_home_is_taken_as_it_is_and_a_tilde_inside_a_text_is_left_to_hydra():
    assert command_line_problems("data=own", 'data.path="~/data/r8"') == []
    # No path from home to write another way: Hydra's own message, not advice about the shell.
    assert command_line_problems("text=[a ~ b,c]", app="predict") == []


def test_all_problems_come_in_one_message():
    found = command_line_problems("trainer.epoch=3", "trainer.lr=abc", "model.n_heads=5", "data.val_fraction=2",
                                  "+model.pe=true")
    assert len(found) == 5
    assert [f.split(" ")[0].split("=")[0].rstrip(":") for f in found] == [
        "trainer.epoch", "trainer.lr", "data.val_fraction", "model.pe", "model.n_heads"]


def test_every_value_of_a_sweep_is_checked():
    assert command_line_problems("-m", "trainer.lr=1e-3,abc,0") == ["trainer.lr=abc: must be a number.",
                                                                   "trainer.lr=0: must be > 0."]
    assert command_line_problems("-m", "model=naive,efficient", "seed=range(0,3)") == []


def test_a_rule_that_only_a_later_job_of_a_sweep_breaks_stops_the_sweep_before_its_first_job():
    """A mistake in the settings stops before anything runs, with one message that lists every problem. In a sweep
    whose first job is valid, a later job whose settings break a rule between settings (a head count d_model does
    not divide, pe=true with an odd d_model) is found with the command line, not by that job once the jobs before it
    have trained; a valid sweep still runs."""
    assert command_line_problems("-m", "model.n_heads=8,5") == [
        "model.n_heads=5: model.d_model=64 is not divisible by it; each head gets d_model // n_heads dimensions "
        "(choose among [1, 2, 4, 8, 16, 32, 64])."]
    assert command_line_problems("-m", "seed=0,1", "pe=false,true", "model.d_model=63", "model.n_heads=1") == [
        "pe=true needs an even model.d_model (sin/cos pairs), got 63."]
    assert command_line_problems("-m", "seed=0,1", "pe=false,true", "model.d_model=62", "model.n_heads=1") == []


def test_values_from_experiment_files_are_checked_with_the_command_line():
    # experiment=best sets data.max_length=1024; the rule between d_model and pe still sees the whole config.
    assert command_line_problems("experiment=best", "model.d_model=63", "model.n_heads=1", "pe=true") == [
        "pe=true needs an even model.d_model (sin/cos pairs), got 63."]


def test_interpolations_are_judged_once_composed():
    assert command_line_problems("trainer.epochs=${trainer.batch_size}") == []
    (found,) = command_line_problems("trainer.epochs=${trainer.lr}")
    assert found.startswith("trainer.epochs: While dereferencing interpolation '${trainer.lr}'")
    assert "could not be converted to Integer" in found


def test_a_correct_command_line_passes():
    assert command_line_problems("model=naive", "pe=true", "trainer.epochs=3", "trainer.lr=1e-3",
                                 "data.max_train_samples=64", "trainer.grad_clip=null", "experiment=best") == []


def test_an_accuracy_of_1_is_a_level_time_to_accuracy_may_name():
    """The refusal says accuracies lie in (0,1]: 1 itself, perfect validation accuracy, is a level to time."""
    assert command_line_problems("time_to_accuracy=[0.5,1]") == []
    assert settings_for("time_to_accuracy=[1.0]").time_to_accuracy == [1.0]


def test_predict_checks_its_own_settings():
    assert command_line_problems("run_dir=x", "text=123", app="predict") == [
        "text=123: was read as int, not as text; quote it for Hydra, e.g. text=\"'123'\" or "
        "text='[\"first text\",\"second text\"]'."]
    assert command_line_problems("run_dir=x", "txt=hello", app="predict") == [
        "txt is not a setting; did you mean text?"]
    # predict has no config groups to suggest
    assert command_line_problems("run_dir=x", "text=hi", "modle=naive", app="predict") == [
        f"modle is not a setting (see --help for all {len(dataclasses.fields(PredictSettings))})."]
    found = command_line_problems("text=hello", app="predict")
    assert found == ["run_dir is required (a training run folder (holds model.pt and tokenizer/))."]
    assert command_line_problems("run_dir=null", "text=hi", app="predict") == ["run_dir=null: must be text."]
    assert command_line_problems("run_dir=x", "text='123'", app="predict") == []


def test_settings_objects_are_checked_too():
    settings = settings_for()
    assert problems(settings) == []
    settings.trainer.epochs, settings.model.n_heads = 0, 5
    assert [p.split(":")[0] for p in problems(settings)] == ["trainer.epochs=0", "model.n_heads=5"]
    with pytest.raises(UserError, match="Invalid setting"):
        settings_for("trainer.lr=-1")


@pytest.mark.unit
def test_lookup_knows_every_key_and_the_derived_ones():
    keys = known_keys(TrainSettings)
    assert {"model.d_model", "trainer.lr", "data.path", "tokenizer.vocab_size", "pe", "probes.order"} <= set(keys)
    assert not set(DERIVED) & set(keys)
    for key in keys:
        assert isinstance(lookup(TrainSettings, key), tuple) or key == "model.attention", key  # that: model=...
    assert isinstance(lookup(PredictSettings, "model.pe"), str)


@pytest.mark.unit
def test_a_key_inside_a_mapping_setting_says_the_mapping_is_set_whole():
    """search's params maps settings (whose names hold dots) to ranges, so `params.data.max_length=...` cannot reach
    a key of it: the message gives the form that does. A key below a plain value is a typo as any other."""
    assert lookup(SearchSettings, "params.data.max_length") == (
        "params.data.max_length is not a setting: params maps keys to values, and takes them whole, merged into its "
        "own: 'params={data.max_length: \"<value>\"}' (quoted for the shell).")
    assert lookup(TrainSettings, "trainer.lr.x").startswith("trainer.lr.x is not a setting; did you mean trainer.lr")


@pytest.mark.unit
def test_an_unquoted_range_inside_params_is_answered_with_the_quoted_form_that_composes():
    """Inside braces an unquoted choice(...) is a sweep object to Hydra, not the text params holds (it crashed deep
    in OmegaConf): the answer quotes it, and the quoted form it gives composes into the search's space."""
    (override,) = OverridesParser.create().parse_overrides(["params={data.max_length: choice(64,128)}"])
    (message,) = cli.check_override(SearchSettings, override)
    quoted = re.search(r"e\.g\. '(.*?)'; unquoted", message)[1]
    assert quoted == 'params={data.max_length: "choice(64, 128)"}', message
    composed = compose_config([quoted], app="search")
    assert composed.params["data.max_length"] == "choice(64, 128)"


@pytest.mark.unit
def test_help_lists_every_setting_with_its_default():
    table = help_table(TrainSettings)
    defaults = TrainSettings()
    for key in known_keys(TrainSettings):
        line = next(line for line in table.splitlines() if line.split()[:1] == [key])
        value = defaults
        for part in key.split("."):
            value = getattr(value, part, None)
        if isinstance(value, int | float) and not isinstance(value, bool):
            assert f" {value:g} " in line, line
    assert "model.attention" in table and "(model=...)" in table
    assert "one of constant | linear | cosine" in " ".join(table.split())  # the choices, whatever the line breaks


@pytest.mark.unit
@pytest.mark.parametrize("app", sorted(cli.SCHEMAS))
def test_help_shows_every_setting_s_default_as_it_is_typed_lists_and_text_included(app):
    """`--help` lists every setting with its default, meaning and valid values: the default column of each app's
    help page, for every key, is the value a fresh settings object holds, written as the command line takes it
    (probes.attention's sentence, time_to_accuracy's levels, the schedule's name, null), or the config group that
    fills a required one."""
    cls = cli.SCHEMAS[app]
    lines = help_table(cls).splitlines()
    fresh = cls()
    for key in known_keys(cls):
        value = fresh
        for part in key.split("."):
            value = getattr(value, part)
        shown = show(value) if value != MISSING else f"({key.split('.')[0]}=...)" if "." in key else "(required)"
        line = next(line for line in lines if line.startswith(f"  {key} "))  # (its wrapped meaning follows)
        assert re.match(rf"  {re.escape(key)} +{re.escape(shown)}  ", line), (shown, line)
    if app == "train":
        assert any(re.match(r"  probes\.attention +\[can you can that\]  ", line) for line in lines)
        assert any(re.match(r"  time_to_accuracy +\[0\.85,0\.9,0\.95\]  ", line) for line in lines)


@pytest.mark.unit
def test_help_gives_every_setting_its_meaning_and_its_valid_values():
    """`python -m train --help`: every setting with its meaning (the schema's help text) and, where the schema bounds
    it, its range or its choices."""
    lines = help_table(TrainSettings).splitlines()
    starts = [i for i, line in enumerate(lines) if line[2:3] != " "]
    entries = {lines[i].split()[0]: " ".join(" ".join(lines[i:j]).split())
               for i, j in zip(starts, [*starts[1:], len(lines)], strict=True)}
    assert set(entries) == set(known_keys(TrainSettings))
    for key, entry in entries.items():
        found = lookup(TrainSettings, key)
        if isinstance(found, tuple):  # (model.attention is chosen with model=...)
            assert " ".join(found[1].metadata["help"].split()) in entry, entry
    assert entries["model.dropout"].endswith("range [0,1)") and entries["model.d_model"].endswith("range >0")
    assert entries["model.token_dropout_keep"].endswith("range ≥0")
    assert entries["trainer.schedule"].endswith("one of constant | linear | cosine")


def test_data_rules_hold_for_every_app_that_reads_data():
    with pytest.raises(UserError, match=r"data\.text_column=5: must be a column name"):
        settings_for("data.text_column=5", app="baseline")
    with pytest.raises(UserError, match=r"data\.text_column=\[\]: must be a column name"):
        settings_for("data.text_column=[]")


# Every bounded setting's valid values, written out as --help states them (`range (0,1)`, `range >0`, ...): the values
# at an open end, and just past a closed one, are mistakes; a closed end itself is a value.
RANGES = {
    "model.d_model": ">0", "model.n_heads": ">0", "model.mlp_hidden": ">0", "model.dropout": "[0,1)",
    "model.embedding_dropout": "[0,1)", "model.token_dropout": "[0,1)", "model.token_dropout_keep": "≥0",
    "model.mlp_dropout": "[0,1)", "model.bigram_buckets": "≥0", "data.val_fraction": "(0,1)",
    "data.test_fraction": "(0,1)",
    "data.max_length": ">2", "data.max_train_samples": ">0", "data.max_eval_samples": ">0",
    "tokenizer.vocab_size": ">0", "tokenizer.min_frequency": ">0", "trainer.epochs": ">0", "trainer.batch_size": ">0",
    "trainer.lr": ">0", "trainer.weight_decay": "≥0", "trainer.warmup_epochs": "≥0", "trainer.grad_clip": ">0",
    "trainer.label_smoothing": "[0,1)", "trainer.rdrop": "≥0", "trainer.patience": ">0", "trainer.num_threads": ">0",
    "seed": "[0,4294967296)",
}


def _ends(interval: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(refused values with the words of their refusal, accepted values) at the ends of an interval as --help
    writes it."""
    low, high = re.fullmatch(r"[>≥\[(]?([^,]+?)(?:,([^)\]]+))?[)\]]?", interval.lstrip(">≥")).groups()
    refused, accepted = [], []
    if interval.startswith((">", "(")):
        refused.append((low, f"must be > {low}"))
    else:  # ≥ or [: the end is a value, just past it is not
        accepted.append(low)
        refused.append((f"{float(low) - 1:g}", f"must be ≥ {low}"))
    if high is not None:
        if interval.endswith(")"):
            refused.append((high, f"must be < {high}"))
        else:
            accepted.append(high)
    return refused, accepted


@pytest.mark.parametrize("key", sorted(RANGES))
def test_every_bounded_setting_refuses_the_values_at_and_past_the_ends_help_states_and_takes_a_closed_end(key):
    """Every setting is checked before anything runs (types, ranges, choices, all listed in one message with exit
    code 2), and `python -m train --help` gives each setting's range. A share of the
    training texts is in (0,1) (data.val_fraction=0 would otherwise reach the data stage after the run folder is
    made, a refusal there), a dropout or a label smoothing in [0,1) (1 would leave no signal to learn), a seed below
    2^32 (numpy's seeds): each range, written out above from --help, against what the check refuses and lets
    through."""
    lines = help_table(TrainSettings).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {key} "))
    end = next((i for i in range(start + 1, len(lines)) if lines[i][2:3] != " "), len(lines))
    assert " ".join(" ".join(lines[start:end]).split()).endswith(f"range {RANGES[key]}"), lines[start:end]
    refused, accepted = _ends(RANGES[key])
    for value, words in refused:
        assert command_line_problems(f"{key}={value}") == [f"{key}={value}: {words}."], value
    for value in accepted:
        assert command_line_problems(f"{key}={value}") == [], value


@pytest.mark.unit
def test_every_bounded_setting_of_the_schema_is_in_the_table_of_ranges():
    fields = {key: found[1] for key in known_keys(TrainSettings) if isinstance(found := lookup(TrainSettings, key),
                                                                                 tuple)}
    bounded = {key for key, f in fields.items() if any(f.metadata.get(b) is not None for b in ("gt", "ge", "lt", "le"))}
    assert bounded == set(RANGES)


@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
@pytest.mark.parametrize("key", ["trainer.lr", "trainer.warmup_epochs", "trainer.grad_clip", "trainer.weight_decay"])
def test_a_number_that_is_not_finite_is_a_mistake_even_where_its_bound_would_hold(key, value):
    """Every setting is checked before anything runs, finiteness too: trainer.lr=inf is above 0, yet no
    learning rate; inf and nan are refused as numbers before any bound is compared (inf would pass "> 0" and the run
    would diverge in its first epoch, or fail to build its schedule from an infinite warm-up)."""
    assert command_line_problems(f"{key}={value}") == [f"{key}={value}: must be a finite number."]
