"""Every setting of the commands (train, predict, the baseline, search), typed, with its default, its meaning, its
valid range and what it decides in a run: the one source.

One dataclass per config group (model, data, tokenizer, trainer, probes, logger) and one per entry point
(`TrainSettings`, `PredictSettings`, ...). The entry points register them with Hydra as structured configs, so the YAML
files in configs/ hold only what differs from these defaults (a variant's `attention`, a dataset's `path`, an
experiment's deltas), and `--help` is generated from the same fields (checks.py). The library takes these objects as
plain, typed arguments.

Each training setting says what it decides (`setting`); what summaries group by, what a continued run must keep, what
keys the in-process input cache and what a sweep folder's name leaves out are derived from that, below the schema.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import MISSING as NO_DEFAULT
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from omegaconf import MISSING

FINAL_WEIGHTS = ("last", "best")
SCHEDULES = ("constant", "linear", "cosine")
FEATURES = ("wordpiece", "words", "chars")
PRECISIONS = ("fp32", "bf16")
# torch: the run's model.pt; onnx / onnx-int8: the run's export/ (python -m export), without torch
BACKENDS = ("torch", "onnx", "onnx-int8")


def show(value: Any) -> str:
    """A value as it is typed on the command line."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ",".join(show(v) for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)


# What a setting decides, in the order a run builds its products: the corpus (texts, labels, splits), the tokenizer
# and the encoded texts, the model, its training. A setting that decides a product decides every product after it, so
# a product is the same wherever the settings of its own stage and of the stages before it are (inputs.py keys its
# cache by exactly those). None: nothing trained (a path, a thread count, a logger, what is reported).
STAGES = ("corpus", "tokenizer", "model", "training")
_UNDECLARED = "undeclared"  # a test checks that every training setting says what it decides


def setting(default: Any = NO_DEFAULT, help: str = "", *, decides: str | None = _UNDECLARED,
            continuable: bool = False, names_folder: bool = True, by_length: tuple | None = None,
            adapts: bool = False, column: str | None = None, factory=None, choices=None, gt=None, ge=None, lt=None,
            le=None, group_choice: str | None = None) -> Any:
    """A dataclass field that carries its meaning (for --help), its valid values (for `problems`) and its role in a run.

    - `decides`: one of STAGES, or None for a setting that changes nothing trained. Summaries group runs by what
      decides something, a continued run must keep it, and the in-process input cache is keyed by it.
    - `continuable`: a continued run may change it although it decides something (more epochs, data moved).
    - `names_folder`: a sweep job's folder name shows it when it is swept (paths and lists would nest folders or
      need quotes, overwrite must land in the same folder: configs/hydra/default.yaml's exclude_keys lists these).
    - `by_length`: null adapts to the corpus, the first value for most corpora, the second for a corpus of long
      texts (resolve.py); `{null}` in `help` says so. `adapts`: null adapts to the corpus by a rule of its own.
    - `column`: the runs table's column that stands for it (the dataset for data.path).
    - `group_choice`: the value is set by choosing a config group option (model.attention by model=naive), and only
      that way on the command line.
    """
    if by_length is not None:
        short, long = (show(v) for v in by_length)
        help = help.replace("{null}", f"null: {short}, or {long} for a corpus of long texts")
    metadata = {"help": help, "choices": choices, "gt": gt, "ge": ge, "lt": lt, "le": le, "group_choice": group_choice,
                "decides": decides, "continuable": continuable, "names_folder": names_folder,
                "by_length": by_length, "adapts": adapts or by_length is not None, "column": column}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


# data.separator's values: names, as the characters themselves need quotes on a command line that Hydra reads.
SEPARATORS = {"comma": ",", "semicolon": ";", "tab": "\t", "pipe": "|"}


# The names of attention.VARIANTS, here so that checking a command line needs no torch (a mistake is answered in a
# second, not after importing it); attention.py builds its table from this tuple.
ATTENTION_VARIANTS = ("naive", "efficient", "torch")

# Settings left null that take one of two values by the length of the corpus's texts (`by_length`, decided in
# resolve.py): the first for most corpora, the second for a corpus of long texts, where the median training text has
# LONG_TEXT tokens or more ([CLS] and [SEP] included, cut at data.max_length). Token dropout hides most of such a
# text, a different part at every pass, so the model gains from more passes, heavier dropout, wider vectors, smoothed
# labels and the positions of what it sees; on short texts, which token dropout leaves whole
# (model.token_dropout_keep), the same settings overfit. Measured on eight corpora (docs/own-data.md): 20 Newsgroups
# +2.4 points of test accuracy, short-text corpora up to −3. And since token dropout leaves short texts whole, they
# take their regularisation as dropout on the token vectors and on the [CLS] vector instead (validation accuracy rose
# on all six corpora of short texts).
LONG_TEXT = 128

# A class with thousands of training texts is learnt in a few passes, and later passes memorise it: on short texts,
# whose hashed bigrams give the model a table to memorise them with, the validation accuracy of Rotten Tomatoes and of
# the Chinese reviews (2,800 and 5,200 training texts a class) peaked at epoch 2 of 12 and fell after. So
# trainer.epochs left null takes no more passes than show each class about CLASS_VIEWS training texts on average, and
# at least MIN_EPOCHS: 4 passes on those two corpora (+1.4 and +1.3 test points, 3 seeds), 6 on the election tweets,
# and on the other corpora, whose classes have at most 514 texts, the value above (docs/own-data.md).
CLASS_VIEWS = 11_000
MIN_EPOCHS = 4

# R-Drop (trainer.rdrop) pays where classes are large and costs small ones their recall: at 3 seeds, the three corpora
# whose classes average 1,900 to 5,200 training texts gained 0.7 to 0.9 points of validation accuracy with it, the
# three of 94 to 514 lost validation accuracy or 7 points of macro-F1 (docs/own-data.md). Left null, it is RDROP
# where the training texts average RDROP_CLASS_SIZE or more a class, and 0 elsewhere.
RDROP = 1.0
RDROP_CLASS_SIZE = 1_000

# Settings added since runs were first saved, with the value every run saved without them had: a continued run, or a
# checkpoint, from before keeps computing what it computed.
ADDED_SINCE = {"model.bigram_buckets": 0, "model.pe_gate": False, "trainer.rdrop": 0.0}


@dataclass
class ModelSettings:
    """The architecture a user chooses; the pipeline adds what it derives (`ModelConfig`)."""

    attention: str = setting(MISSING, "the attention variant, chosen with model=<variant>", choices=ATTENTION_VARIANTS,
                             group_choice=f"model={'|'.join(ATTENTION_VARIANTS)}", decides="model", column="model")
    d_model: int | None = setting(None, "width of the token vectors and of attention; {null} (see trainer.epochs)",
                                  gt=0, decides="model", by_length=(64, 128))
    n_heads: int = setting(8, "attention heads; each gets d_model // n_heads dimensions", gt=0, decides="model")
    mlp_hidden: int = setting(128, "hidden units of the classifier MLP on the [CLS] vector", gt=0, decides="model")
    bias: bool = setting(True, "biases on the q/k/v/output projections", decides="model")
    dropout: float = setting(0.0, "dropout on the attention weights", ge=0, lt=1, decides="model")
    embedding_dropout: float | None = setting(None, "dropout on the token embeddings (before pe adds positions to "
                                                    "the attention's queries and keys); {null} (see trainer.epochs)",
                                              ge=0, lt=1, decides="model", by_length=(0.1, 0.0))
    token_dropout: float | None = setting(None, "while training, hide each token but [CLS] from attention with this "
                                                "probability (word dropout); {null} (see trainer.epochs)", ge=0, lt=1,
                                          decides="model", by_length=(0.75, 0.85))
    token_dropout_keep: int = setting(32, "token dropout never leaves a text fewer than this many tokens: a text of n "
                                          "tokens besides [CLS] is hidden with min(token_dropout, 1 - keep/n), so "
                                          "short texts (snippets, tweets) lose few or none", ge=0, decides="model")
    mlp_dropout: float | None = setting(None, "dropout on the [CLS] vector entering the classifier; {null} (see "
                                              "trainer.epochs)", ge=0, lt=1, decides="model", by_length=(0.2, 0.0))
    # Short texts gain most from the pairs (a word's neighbour is much of what a snippet says): at 3 seeds the tweets
    # +2.4 test points, Rotten Tomatoes +1.4, the Chinese reviews +1.0, R52's macro-F1 +4.9; and once the table learnt
    # lazily, the long texts of bbc-news and 20 Newsgroups +0.8 and +0.4 points of validation accuracy
    # (docs/own-data.md).
    bigram_buckets: int = setting(65536, "hashed bigram embeddings (fastText's n-gram features): each token adds the "
                                         "vector of its bigram with the token before it, one of this many hashed "
                                         "buckets; 0: none", ge=0, decides="model")
    pe_gate: bool = setting(True, "with pe: the encoding enters the queries and keys times a learned scale that "
                                  "starts at 0 (training decides how much position counts); false: added whole",
                            decides="model")
    cls_only: bool = setting(False, "attend with the [CLS] query alone: O(T) instead of O(T²), the same logits and "
                                    "gradients while model.dropout is 0", decides="model")


@dataclass
class DataSettings:
    path: str = setting(MISSING, "a local folder or file (.jsonl .json .csv .tsv .parquet, compressed too; or a "
                                 "folder written by datasets' save_to_disk) or a Hugging Face hub id; set by the data "
                                 "config, e.g. data=bbc_news, which reads $BBC_NEWS_PATH",
                        decides="corpus", continuable=True, names_folder=False, column="dataset")
    name: str | None = setting(None, "the configuration of a hub dataset that has several", decides="corpus")
    text_column: Any = setting("text", "the column holding the text, or a list of columns joined with a space "
                                       "([title,body])", decides="corpus")
    label_column: str = setting("label", "the column holding the label: integer ids, class names, or a ClassLabel",
                                decides="corpus")
    separator: str | None = setting(None, "the column separator of .csv and .tsv files, by name; null: a comma for "
                                          ".csv, a tab for .tsv", choices=(None, *SEPARATORS), decides="corpus",
                                    names_folder=False)
    val_fraction: float = setting(0.25, "validation share carved from train (when the data has no validation "
                                        "split), stratified, with `seed`", gt=0, lt=1, decides="corpus")
    test_fraction: float = setting(0.2, "test share carved from train first (when the data has no test split), "
                                        "stratified, the same texts for every seed", gt=0, lt=1, decides="corpus")
    # The tokenizer carries it (and saves it into the run folder), and the encodings are cut at it.
    max_length: int = setting(512, "tokens per text including [CLS] and [SEP]; longer texts are truncated", gt=2,
                              decides="tokenizer")
    max_train_samples: int | None = setting(None, "subsample the training split (quick runs); val/test shrink in "
                                                  "proportion unless max_eval_samples is set (the same test texts "
                                                  "for every seed)", gt=0, decides="corpus")
    max_eval_samples: int | None = setting(None, "cap the validation and test splits at this many texts", gt=0,
                                           decides="corpus")
    group_by_length: bool = setting(True, "batch texts of similar length together, so that batches pad little: for "
                                          "training in a seeded random order, for evaluation sorted",
                                    decides="training")


@dataclass
class TokenizerSettings:
    vocab_size: int | None = setting(None, "WordPiece vocabulary size, special tokens included; null: grows with "
                                           "the corpus, as many tokens as words and characters that occur "
                                           "min_frequency times or more in the training texts (WordPiece merges the "
                                           "most frequent pairs first, so many words seen up to a few times that "
                                           "often stay split), at least 1000 (resolved once, logged and "
                                           "written into config.yaml and metrics.json). When the training texts "
                                           "have more characters than fit, the most frequent take up to half of it "
                                           "and the others become [UNK] (a run warns when a split's [UNK] rate is "
                                           "high)", gt=0, decides="tokenizer", adapts=True)
    min_frequency: int = setting(20, "with vocab_size null: how often a word or character must occur in the training "
                                     "texts to count towards the vocabulary's size", gt=0, decides="tokenizer")
    base: str | None = setting(None, "null: train WordPiece from scratch; a hub id or local folder: retrain that "
                                     "tokenizer's pipeline on the training texts", decides="tokenizer",
                               names_folder=False)
    cache_dir: str | None = setting(None, "where trained tokenizers are cached; null: $MHA_TEXTCLF_CACHE or "
                                          "~/.cache/mha-textclf", decides=None, names_folder=False)


@dataclass
class TrainerSettings:
    # A continued run may train longer where the learning rate does not decay over the epochs it was started with
    # (runs/lifecycle.py checks the schedule).
    epochs: int | None = setting(None, "passes over the training split; {null} (its median "
                                       f"training text has {LONG_TEXT} tokens or more), which with model.d_model, "
                                       "model.token_dropout, trainer.label_smoothing and pe left null trains longer, "
                                       "wider and more regularised, with positions, and with "
                                       "model.embedding_dropout and model.mlp_dropout at 0, token dropout "
                                       "regularising alone; and never more passes than show each class about "
                                       f"{CLASS_VIEWS:,} training texts on average (at least {MIN_EPOCHS}): fewer on "
                                       "a corpus of large classes (resolved once, logged and written into config.yaml "
                                       "and metrics.json)", gt=0,
                                 decides="training", continuable=True, by_length=(12, 24))
    batch_size: int = setting(32, "texts per optimiser step", gt=0, decides="training")
    lr: float = setting(3e-3, "AdamW's peak learning rate (and that of the lazy Adam a bigram table learns with)",
                        gt=0, decides="training")
    weight_decay: float = setting(0.01, "AdamW's decoupled weight decay (not on a bigram table: lazy Adam has none)",
                                  ge=0, decides="training")
    schedule: str = setting("cosine", "learning-rate decay after the warm-up, per step (linear and cosine reach 0 "
                                      "at the last epoch)",
                            choices=SCHEDULES, decides="training")
    warmup_epochs: float = setting(1.0, "linear warm-up from 0 over this many epochs (fractions allowed)", ge=0,
                                   decides="training")
    grad_clip: float | None = setting(None, "max global gradient norm; null: no clipping", gt=0, decides="training")
    label_smoothing: float | None = setting(None, "label smoothing of the training loss (validation loss stays "
                                                  "plain); {null} (see trainer.epochs)", ge=0, lt=1,
                                            decides="training", by_length=(0.0, 0.1))
    rdrop: float | None = setting(None, "R-Drop (Liang et al., 2021): each batch goes through the model twice, with "
                                        "other dropout draws, and training minimises the mean of the two "
                                        "cross-entropies plus this weight times their symmetric KL divergence; 0: "
                                        f"one pass; null: {RDROP:g} where the training texts average "
                                        f"{RDROP_CLASS_SIZE:,} or more a class, else 0 (resolved once, logged and "
                                        "written into config.yaml and metrics.json)", ge=0, decides="training",
                                  adapts=True)
    patience: int | None = setting(None, "stop after this many epochs without a lower validation loss; null: "
                                         "train every epoch", gt=0, decides="training")
    final_weights: str = setting("last", "the weights the run ends with, saves as model.pt and reports: last (the "
                                         "last finished epoch: the end of the schedule, or where patience stopped) "
                                         "or best (the lowest validation loss; best.pt holds it either way)",
                                 choices=FINAL_WEIGHTS, decides="training")
    num_threads: int | None = setting(None, "torch intra-op threads; null: torch's default, or the launcher's "
                                            "share of the cores", gt=0, decides=None)
    class_weights: str | None = setting(None, "null: every text counts the same; balanced: weight each class by "
                                              "n_texts / (n_classes * its count), as scikit-learn does, in the "
                                              "training and validation loss", choices=(None, "balanced"),
                                        decides="training")
    precision: str = setting("fp32", "numeric precision; bf16 autocasts matmuls to bfloat16 (for CUDA; slower on "
                                     "most CPUs)",
                             choices=PRECISIONS, decides="training")


@dataclass
class TensorBoardSettings:
    enabled: bool = setting(False, "log to TensorBoard; turned on by logger=tensorboard (or many)", decides=None)
    subdir: str = setting("tensorboard", "the event files' folder inside the run folder", decides=None)


@dataclass
class MLflowSettings:
    enabled: bool = setting(False, "log to MLflow; turned on by logger=mlflow (or many)", decides=None)
    tracking_uri: str | None = setting(None, "where MLflow records runs; null: $MLFLOW_TRACKING_URI, else "
                                             "sqlite:///outputs/mlflow.db", decides=None, names_folder=False)
    experiment: str | None = setting(None, "the MLflow experiment; null: the sweep's name for its jobs, else "
                                           "mha-textclf", decides=None)


@dataclass
class LoggerSettings:
    """Chosen with logger=tensorboard|mlflow|many (configs/logger/); none by default."""

    tensorboard: TensorBoardSettings = setting(help="", factory=TensorBoardSettings)
    mlflow: MLflowSettings = setting(help="", factory=MLflowSettings)


@dataclass
class ProbeSettings:
    attention: list[str] = setting(help="sentences drawn as attention heatmaps (attention_<slug>.png)",
                                   factory=lambda: ["can you can that"], decides=None, names_folder=False)
    order: list[str] = setting(help="the same words in other orders: their class probabilities "
                                    "(order_probe.json) differ only with pe=true or bigrams "
                                    "(model.bigram_buckets)",
                               factory=lambda: ["how are you", "you how are"], decides=None, names_folder=False)


@dataclass
class TrainSettings:
    """python -m train: one run, or one job of a sweep."""

    model: ModelSettings = setting(help="", factory=ModelSettings)
    data: DataSettings = setting(help="", factory=DataSettings)
    tokenizer: TokenizerSettings = setting(help="", factory=TokenizerSettings)
    trainer: TrainerSettings = setting(help="", factory=TrainerSettings)
    probes: ProbeSettings = setting(help="", factory=ProbeSettings)
    logger: LoggerSettings = setting(help="", factory=LoggerSettings)
    pe: bool | None = setting(None, "add sinusoidal positional encoding to the attention's queries and keys (not its "
                                    "values); {null} (see trainer.epochs)", decides="model", by_length=(False, True),
                              column="pe")
    # The earliest stage it decides: the carved validation split (then the weights, the batch order, dropout).
    seed: int = setting(0, "seeds the validation split, weight init, batch order and dropout", ge=0, lt=2**32,
                        decides="corpus", column="seed")
    device: str = setting("auto", "auto (CUDA when available) | cpu | cuda | cuda:N", decides=None)
    resume: str | None = setting(None, "a run folder to continue from its last.pt, into a new run folder",
                                 decides=None, names_folder=False)
    # Not in a folder's name: the same sweep again with overwrite=true must land in the same folders.
    overwrite: bool = setting(False, "start afresh in a run folder that holds a run (its results are deleted); "
                                     "otherwise the same command continues or skips it, and other settings are "
                                     "refused", decides=None, names_folder=False)
    time_to_accuracy: list[float] = setting(help="validation accuracies whose first arrival (in training seconds) "
                                                 "metrics.json and the summaries report",
                                            factory=lambda: [0.85, 0.9, 0.95], decides=None, names_folder=False)


@dataclass(kw_only=True)
class ModelConfig(ModelSettings):
    """The whole architecture: what a user sets (`ModelSettings`, with its defaults) plus what the pipeline derives,
    each from one source (`derived_from`, which the command line names when someone sets it).

    Saved with the weights in every checkpoint, so a model can be rebuilt from its file alone.
    """

    vocab_size: int = field(metadata={"derived_from": "the trained tokenizer's size (set tokenizer.vocab_size)"})
    n_classes: int = field(metadata={"derived_from": "the classes in the training data"})
    pe: bool = field(metadata={"derived_from": "the top-level switch (use pe=true)"})
    # The longest input the positional encoding covers.
    max_length: int = field(metadata={"derived_from": "data.max_length (set that)"})
    pad_id: int = field(metadata={"derived_from": "the tokenizer's [PAD] token"})

    def __post_init__(self):
        require_decided(self, "model")


@dataclass
class PredictSettings:
    """python -m predict: class probabilities for new texts from a trained run."""

    run_dir: str = setting(MISSING, "a training run folder (holds model.pt and tokenizer/)")
    text: Any = setting(None, "a text, or a list of texts: text='[\"first text\",\"second text\"]'")
    file: str | None = setting(None, "a text file, one text per line (blank lines skipped)")
    out: str | None = setting(None, "also write the table as CSV here")
    device: str = setting("cpu", "cpu | cuda | cuda:N | auto; a model trained on a GPU runs on the CPU too")
    backend: str = setting("torch", "torch: the run's model.pt; onnx | onnx-int8: the run's export/ folder "
                                    "(python -m export), which needs neither torch nor the training stack",
                           choices=BACKENDS)
    calibrated: bool = setting(True, "divide the logits by the temperature the run fitted on its validation split "
                                     "(metrics.json: calibration.temperature) before the softmax; false: the plain "
                                     "softmax. The predicted class is the same either way")


@dataclass
class ExportSettings:
    """python -m export: a run as ONNX (fp32, int8), its tokenizer, classes, model card (pip install -e ".[export]")."""

    run_dir: str = setting(MISSING, "a finished training run folder (holds model.pt and tokenizer/); the export "
                                    "lands in its export/ folder")


@dataclass
class BaselineSettings:
    """python scripts/baseline_tfidf.py: TF-IDF + a linear classifier on exactly the training runs' splits."""

    data: DataSettings = setting(help="", factory=DataSettings)
    tokenizer: TokenizerSettings = setting(help="", factory=TokenizerSettings)
    features: str = setting("wordpiece", "wordpiece: the training runs' tokenizer and truncation, as a bag of "
                                         "tokens; words: word uni- and bigrams of the whole text; chars: character "
                                         "1- to 4-grams of the whole text (any script, spaces or none)",
                            choices=FEATURES)
    seed: int = setting(0, "seeds the validation split, as in training", ge=0, lt=2**32)


# A RUNNING trial whose worker has been silent for this many heartbeats (search's heartbeat_seconds) is taken for
# dead: a worker under load may miss one, a killed worker misses them all.
MISSED_HEARTBEATS = 3


@dataclass
class SearchSettings:
    """python -m search: a hyperparameter search with Optuna over a space from configs/hparams_search/."""

    study: str = setting(MISSING, "the study's name: its folder outputs/search/<study> and its record in storage")
    storage: str | None = setting(None, "where the study is recorded, and where workers started with the same "
                                        "command meet: null, a journal file in the study's folder; another file "
                                        "path, a journal file there; an SQLAlchemy URL (with ://), a database. Run "
                                        "the same command again to resume an interrupted study, with more n_trials "
                                        "to extend it")
    n_trials: int = setting(40, "finished (complete or pruned) trials the study should have, whatever worker "
                                "finished them; a worker runs at most this many more", gt=0)
    timeout_minutes: float | None = setting(None, "this worker stops starting trials after this long; null: no "
                                                  "limit", gt=0)
    num_threads: int | None = setting(None, "torch threads for this worker's trials (workers sharing a machine "
                                            "share its cores: 1 each on 2 cores for 2 workers); null: torch's "
                                            "default, all cores. trainer.num_threads in train wins", gt=0)
    heartbeat_seconds: int = setting(20, "while a trial runs, its worker says so this often; a trial silent for "
                                         f"{MISSED_HEARTBEATS} heartbeats is taken for a killed worker's, failed, and "
                                         "run again once", gt=0)
    train: list[str] = setting(help="the training settings every trial shares, as on the train command line",
                               factory=list)
    params: dict[str, str] = setting(help="the space: a training setting and its range in Hydra's sweep syntax: "
                                          "interval(a,b), int(interval(a,b)), tag(log,interval(a,b)), "
                                          "range(a,b,step), choice(a,b)",
                                     factory=dict)
    pruning: bool = setting(True, "stop a trial whose validation loss, after warmup_epochs, is above the median "
                                  "of the earlier trials' at the same epoch")
    warmup_epochs: int = setting(2, "epochs every trial trains before it may be pruned", ge=0)
    startup_trials: int = setting(5, "trials before pruning starts (the median needs some)", ge=0)
    seed: int = setting(0, "seeds the sampler (TPE): trial n draws with seed + n, whatever worker runs it; the "
                           "trials' own seed is a training setting", ge=0, lt=2**32)


def field_type(owner: type, name: str) -> Any:
    return _type_hints(owner)[name]


@functools.cache
def _type_hints(owner: type) -> dict[str, Any]:
    # The annotations are strings (`from __future__ import annotations`): resolving them compiles each one, and a
    # command line is checked key by key; once per class is enough, the classes do not change.
    return typing.get_type_hints(owner)


def _dataclass_of(kind: Any) -> type | None:
    """The settings dataclass a field holds (also when optional, as logger.mlflow), or None for a plain value."""
    candidates = [kind, *typing.get_args(kind)]
    return next((c for c in candidates if is_dataclass(c)), None)


def _leaves(cls: type, prefix: str = "") -> dict[str, tuple[type, Any]]:
    """Every settable key (`trainer.lr`) with the dataclass that owns it and its field."""
    out = {}
    for f in fields(cls):
        kind = _dataclass_of(field_type(cls, f.name))
        if kind is not None:
            out |= _leaves(kind, f"{prefix}{f.name}.")
        else:
            out[f"{prefix}{f.name}"] = (cls, f)
    return out


# What each training setting is, derived from its declaration (`setting`): the one place a new setting is judged.
_TRAINING = {key: f.metadata for key, (_, f) in _leaves(TrainSettings).items()}
# Where things are, how fast to go, what is logged or reported: never what is trained. A continued run may change them,
# and summaries do not group runs by them. A key the schema does not know (a baseline's `features`, a setting from an
# older version) counts as trained.
NOT_TRAINING = frozenset(key for key, meta in _TRAINING.items() if meta["decides"] is None)
# Besides those, what a continued run may change (runs/lifecycle.py).
CONTINUABLE = frozenset(key for key, meta in _TRAINING.items() if meta["continuable"]) | NOT_TRAINING
# Settings whose null adapts to the corpus: decided once per run (resolve.py) and written into config.yaml, so a
# folder that recorded a value still holds "the same run" for a command that leaves it null.
ADAPTIVE = tuple(key for key, meta in _TRAINING.items() if meta["adapts"])
BY_TEXT_LENGTH = {key: meta["by_length"] for key, meta in _TRAINING.items() if meta["by_length"] is not None}
# The runs table's columns that stand for settings (the dataset for data.path): not repeated as setting columns.
COLUMNS = {key: meta["column"] for key, meta in _TRAINING.items() if meta["column"] is not None}
# What a sweep job's folder name leaves out (configs/hydra/default.yaml's exclude_keys must equal it).
NOT_IN_FOLDER_NAMES = tuple(key for key, meta in _TRAINING.items() if not meta["names_folder"])
# Values the pipeline derives, each from one source: model settings in the checkpoint, never on the command line.
DERIVED = {f"model.{f.name}": f.metadata["derived_from"] for f in fields(ModelConfig) if "derived_from" in f.metadata}


def is_training_setting(key: str) -> bool:
    return key not in NOT_TRAINING


def deciding(stage: str) -> list[str]:
    """The training settings that decide `stage` (one of STAGES): its own and those of every stage before it."""
    earlier = STAGES[: STAGES.index(stage) + 1]
    return [key for key, meta in _TRAINING.items() if meta["decides"] in earlier]


def known_keys(cls: type) -> list[str]:
    return list(_leaves(cls))


def flat(config: dict, prefix: str = "") -> dict[str, Any]:
    """Nested settings (asdict) as flat keys: {"trainer": {"lr": 0.003}} -> {"trainer.lr": 0.003}."""
    out = {}
    for key, value in config.items():
        out |= flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value}
    return out


def require_decided(settings: Any, group: str) -> None:
    """Raise where a setting of `settings` (the dataclass of `group`: model, trainer) that adapts to a corpus
    (ADAPTIVE) is still null: building a model and training take decided values."""
    if left := [k for k in ADAPTIVE if k.startswith(f"{group}.") and getattr(settings, k.split(".", 1)[1]) is None]:
        raise ValueError(f"{', '.join(left)} left null: a setting that adapts to the corpus; give it a value, or let "
                         "resolve.resolve decide it from the training texts.")


def with_values(settings: Any, values: dict[str, Any]) -> Any:
    """A copy of `settings` with these flattened keys (`trainer.epochs`) set."""
    changes: dict[str, Any] = {}
    for key, value in values.items():
        group, _, rest = key.partition(".")
        changes[group] = with_values(changes.get(group, getattr(settings, group)), {rest: value}) if rest else value
    return dataclasses.replace(settings, **changes)



