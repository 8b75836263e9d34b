"""Where a training step's time goes, by operator (torch.profiler): the masked computation over every token, and
attention over the visible tokens only (compaction, the default), side by side on the same batches.

    python scripts/profile_step.py                          # bbc-news, the defaults (model=efficient)
    python scripts/profile_step.py model=naive pe=true      # any training setting, as for python -m train

Prints, for each, the milliseconds per step and the operators that take the most of it, as Markdown.
"""

import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from mha_textclf import cli
from mha_textclf.errors import UserError
from mha_textclf.model import TextClassifier
from mha_textclf.pipeline import build_model, prepare
from mha_textclf.settings import TrainerSettings, TrainSettings
from mha_textclf.training import make_optimizer, seed_everything, training_objective

STEPS, WARMUP = 8, 2


def step(model: TextClassifier, optimizers: tuple, batch: dict, trainer: TrainerSettings) -> None:
    """One training step, as training.fit takes it (without its schedule and bookkeeping): R-Drop's second pass
    where trainer.rdrop is on, AdamW's step, and lazy Adam's for a bigram table."""
    optimizers = [optimizer for optimizer in optimizers if optimizer is not None]
    objective, _ = training_objective(model, batch, trainer, torch.device("cpu"))
    for optimizer in optimizers:
        optimizer.zero_grad(set_to_none=True)
    objective.backward()
    for optimizer in optimizers:
        optimizer.step()


def main(argv: list[str]) -> int:
    if {"-h", "--help"} & set(argv):
        print(f"{__doc__}\nEvery setting, its default and meaning: python -m train --help")
        return 0
    cli.check_command_line("train", argv)  # a mistake in the settings: one message, exit 2
    try:
        return profile_steps(cli.compose_settings("train", argv))
    except UserError as e:  # data that cannot be read, ...: what to do, without a traceback
        print(e, file=sys.stderr)
        return 1


def profile_steps(settings: TrainSettings) -> int:
    seed_everything(settings.seed)
    # As train prepares a run: the same batches, and the model it would build from the settings the corpus decides.
    prepared = prepare(settings, torch.device("cpu"))
    settings, corpus, tokenizer, loader = (prepared.settings, prepared.corpus, prepared.tokenizer,
                                           prepared.loaders["train"])
    batches = [batch for _, batch in zip(range(STEPS + WARMUP), loader, strict=False)]
    print(f"{settings.model.attention}, pe={settings.pe}, cls_only={settings.model.cls_only}, "
          f"R-Drop {settings.trainer.rdrop:g}, bigram buckets "
          f"{settings.model.bigram_buckets}, token dropout "
          f"{settings.model.token_dropout}, batch {settings.trainer.batch_size}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}\n")
    for compact in (False, True):
        torch.manual_seed(0)
        model = build_model(settings, corpus, tokenizer).train()
        model.compact = compact
        optimizers = make_optimizer(model, settings.trainer)
        for batch in batches[:WARMUP]:
            step(model, optimizers, batch, settings.trainer)
        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            start = time.perf_counter()
            for batch in batches[WARMUP:]:
                step(model, optimizers, batch, settings.trainer)
            per_step = (time.perf_counter() - start) / STEPS * 1e3
        print(f"## {'compacted (visible tokens only)' if compact else 'masked (every token)'}: "
              f"{per_step:.1f} ms per step (profiled)\n")
        total = sum(e.self_cpu_time_total for e in profiler.key_averages())
        rows = sorted(profiler.key_averages(), key=lambda e: -e.self_cpu_time_total)[:12]
        print("| operator | calls per step | self ms per step | share |\n|---|---|---|---|")
        for e in rows:
            print(f"| `{e.key}` | {e.count // STEPS} | {e.self_cpu_time_total / 1e3 / STEPS:.1f} | "
                  f"{100 * e.self_cpu_time_total / total:.0f}% |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
