"""TF-IDF + linear classifier on the attention models' own splits: an honest reference for the summary tables.

    python scripts/baseline_tfidf.py                       # wordpiece features, seed 0
    python scripts/baseline_tfidf.py --features words --seed 1

Writes metrics.json, classification reports and confusion matrices into its own run folder (default
outputs/baselines/<date>_<time>_tfidf-<features>_seed-<seed>/), so scripts/summarize.py puts it in the same table.
"""

import argparse
import os
import sys
import time
from pathlib import Path

import yaml

from mha_textclf.baseline import FEATURES, tfidf_baseline
from mha_textclf.data import dataset_name, load_corpus
from mha_textclf.errors import UserError
from mha_textclf.reports import RunMetrics, split_report
from mha_textclf.settings import TokenizerSettings
from mha_textclf.tokenizer import get_tokenizer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-path", default=os.environ.get("BBC_NEWS_PATH", "SetFit/bbc-news"))
    parser.add_argument("--features", choices=FEATURES, default="wordpiece")
    parser.add_argument("--seed", type=int, default=0, help="the validation split's seed, as in train")
    parser.add_argument("--val-fraction", type=float, default=0.25)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--vocab-size", type=int, default=TokenizerSettings.vocab_size)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    name = f"tfidf-{args.features}"
    out = args.out or Path("outputs/baselines") / f"{time.strftime('%Y-%m-%d_%H-%M-%S')}_{name}_seed-{args.seed}"
    try:
        corpus = load_corpus(args.data_path, args.val_fraction, args.seed)
        tokenizer = (get_tokenizer(corpus.train.texts, TokenizerSettings(vocab_size=args.vocab_size), args.max_length)
                     if args.features == "wordpiece" else None)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = tfidf_baseline(corpus, args.features, tokenizer, args.max_length, args.seed)
    out.mkdir(parents=True, exist_ok=True)
    splits = {split: split_report(out, split, getattr(corpus, split).labels, result.predictions[split],
                                  result.losses[split], corpus.class_names, f"{name} on {dataset_name(args.data_path)}")
              for split in ("val", "test")}
    metrics = RunMetrics(model=name, pe=None, seed=args.seed, val=splits["val"], test=splits["test"],
                         class_names=corpus.class_names, params=result.n_features * len(corpus.class_names),
                         train_seconds=result.train_seconds, eval_seconds=0.0, epochs=0, best_epoch=None,
                         stopped_early=False, interrupted_by=None, tokens_per_second=None,
                         vocab_size=args.vocab_size if args.features == "wordpiece" else None, device="cpu",
                         threads=1)
    metrics.write(out / "metrics.json")
    # The training runs' keys, so that a summary lines the two kinds of run up (and where it is written is no setting).
    config = {"model": {"attention": name}, "features": args.features, "seed": args.seed,
              "data": {"path": args.data_path, "val_fraction": args.val_fraction, "max_length": args.max_length},
              "tokenizer": {"vocab_size": args.vocab_size}}
    (out / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    print(f"{name} seed {args.seed}: val accuracy {metrics.val.accuracy:.4f}  test accuracy "
          f"{metrics.test.accuracy:.4f}  ({result.train_seconds:.1f}s)  ->  {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
