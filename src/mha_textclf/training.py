"""The training loop: seeding, device choice, AdamW epochs (lazy Adam for a bigram table) with validation, evaluation,
stopping cleanly."""

from __future__ import annotations

import logging
import math
import random
import signal
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, RandomSampler
from tqdm.auto import tqdm

from mha_textclf.errors import UserError
from mha_textclf.runs.checkpoint import restore_training_state, save_checkpoint, save_training_state
from mha_textclf.settings import TrainerSettings, require_decided

log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def resolve_device(name: str) -> torch.device:
    """`auto` → cuda when available, else cpu; an explicit cuda request without a GPU is an error, not a fallback."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device={name} but PyTorch sees no CUDA GPU (torch {torch.__version__}); "
                        "use device=cpu or device=auto.")
    try:
        return torch.device(name)
    except RuntimeError as e:
        raise UserError(f"device={name!r} is not a device name; use auto, cpu, cuda or cuda:N.") from e


@dataclass
class Evaluation:
    loss: float
    labels: list[int]
    predictions: list[int]
    logits: np.ndarray  # (N, C), float32, rows in the order of `labels`
    positions: list[int]  # row i is the split's text number positions[i] (an evaluation loader may sort by length)

    @property
    def accuracy(self) -> float:
        return float(np.mean(np.array(self.labels) == np.array(self.predictions)))


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def autocast(device: torch.device, precision: str):
    """bf16 autocast (matmuls and attention in bfloat16, reductions and the loss in float32) or plain fp32."""
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def balanced_class_weights(labels: list[int], n_classes: int) -> torch.Tensor:
    """scikit-learn's "balanced" weights, n_samples / (n_classes * count of the class): every class weighs as much
    in the loss as the others together would if they were as frequent. A class absent from `labels` weighs 0."""
    counts = np.bincount(labels, minlength=n_classes).astype(np.float64)
    weights = np.divide(len(labels), n_classes * counts, out=np.zeros(n_classes), where=counts > 0)
    return torch.tensor(weights, dtype=torch.float32)


@torch.inference_mode()  # no autograd bookkeeping at all, not just no gradients
def evaluate(model: nn.Module, loader: DataLoader, device: torch.device, precision: str = "fp32",
             class_weights: torch.Tensor | None = None) -> Evaluation:
    """Mean cross-entropy (class-weighted, when weights are given, as in training), with labels, argmax predictions
    and logits in the order of an (unshuffled) evaluation loader, and where each row's text is in its split."""
    if isinstance(loader.sampler, RandomSampler):
        raise ValueError("evaluate needs a loader in a fixed order (shuffle=False): it reports where each text is")
    model.eval()
    weights = None if class_weights is None else class_weights.to(device)
    total_loss, total_weight, labels, predictions, all_logits = 0.0, 0.0, [], [], []
    for batch in loader:
        batch = _to(batch, device)
        with autocast(device, precision):
            logits = model(batch["input_ids"], batch["padding_mask"]).float()
        total_loss += F.cross_entropy(logits, batch["labels"], weight=weights, reduction="sum").item()
        # The weighted mean divides by the weights of the samples, as cross_entropy's own mean does.
        total_weight += len(batch["labels"]) if weights is None else weights[batch["labels"]].sum().item()
        labels += batch["labels"].tolist()
        predictions += logits.argmax(-1).tolist()
        all_logits.append(logits.detach().cpu())
    # Where each row's text is: the batches again, which for an evaluation loader (sequential, or sorted by length)
    # come in the same order every time; a shuffled loader's would not, and is refused below.
    positions = [i for batch in loader.batch_sampler for i in batch]
    logits = torch.cat(all_logits).numpy() if all_logits else np.zeros((0, 0), dtype=np.float32)
    return Evaluation(total_loss / max(total_weight, 1e-12), labels, predictions, logits, positions)


class DivergenceError(UserError):
    """The loss stopped being a finite number."""


class StopOnSignal:
    """While active, SIGINT/SIGTERM only set `self.signal`; the loop stops cleanly after the current step.

    A second signal gets the default behaviour back (Ctrl-C twice aborts at once). SIGUSR2 is caught too where a
    handler is already installed for it: submitit's, which Slurm's preemption and time-limit warning reach
    (`scancel --signal=USR2`, `--signal=USR2@90`). Killing the job from inside that handler would lose the epoch in
    progress at an arbitrary point; instead the run stops after the step, saves and reports, and `pass_on()` then
    hands the signal to submitit, which requeues the job (it continues in the same folder) and exits.
    """

    def __init__(self):
        self.signal: str | None = None
        self._previous = {}

    def _handle(self, signum, frame):
        self.signal = signal.Signals(signum).name
        what = "requeueing the job once reports are written" if signum == signal.SIGUSR2 else "writing reports"
        log.warning(f"{self.signal} received: stopping after this step and {what} (send it again to abort)")
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)

    def __enter__(self):
        # Python lets only the main thread install handlers; elsewhere (a threaded launcher) signals keep their
        # default behaviour.
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2)}
            if not callable(self._previous[signal.SIGUSR2]):
                del self._previous[signal.SIGUSR2]  # nobody listens for it: its default (terminate) stays
            for sig in self._previous:
                signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)

    def pass_on(self) -> None:
        """Once the run's work is on disk: hand a caught SIGUSR2 to the handler that was installed for it."""
        previous = self._previous.get(signal.SIGUSR2)
        if self.signal == "SIGUSR2" and callable(previous):
            previous(signal.SIGUSR2, None)


def make_optimizer(model: nn.Module, config: TrainerSettings,
                   lazy_table: bool = True) -> tuple[torch.optim.AdamW, torch.optim.SparseAdam | None]:
    """The optimisers training steps with (scripts/profile_step.py profiles the same): AdamW for the model, and
    with `lazy_table`, lazy Adam for its hashed bigram table (None without a table, or without `lazy_table`)."""
    table = getattr(model, "bigrams", None)
    if table is None or not lazy_table:
        # One fused kernel per step instead of a loop over tensors: on the CPU the unfused update of a large
        # bigram table (AdamW's, without lazy_table) dominates the step.
        return torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay, fused=True), None
    # A bigram table's rows are pairs, most of them rare. AdamW moves every row at every step, a row whose pair the
    # batch lacks along the moments of its last occurrence, so a pair seen once is learnt as hard as a frequent one;
    # lazy Adam moves only the rows of the batch's pairs (the table's gradient is made sparse to name them), and
    # skips the step over the other 65,000. Measured at 3 seeds on the six corpora with a table: 0.70-0.80 times
    # the training time, test accuracy -0.2 to +0.7 points (docs/own-data.md). No weight decay: SparseAdam has none.
    table.sparse = True
    rest = [p for p in model.parameters() if p is not table.weight]
    return (torch.optim.AdamW(rest, lr=config.lr, weight_decay=config.weight_decay, fused=True),
            torch.optim.SparseAdam([table.weight], lr=config.lr))


def lr_factor(step: int, total_steps: int, warmup_steps: int, schedule: str) -> float:
    """Multiplier of the base learning rate at optimiser step `step` (0-based)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min((step - warmup_steps) / max(total_steps - warmup_steps, 1), 1.0)
    if schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * progress))
    if schedule == "linear":
        return 1.0 - progress
    return 1.0


@dataclass
class FitResult:
    history: list[dict]  # one row per finished epoch, resumed ones included
    best_epoch: int | None = None  # the epoch with the lowest validation loss (best.pt's)
    reported_epoch: int | None = None  # the epoch whose weights the model holds at the end (config.final_weights)
    stopped_early: bool = False
    interrupted: str | None = None  # the signal that stopped training early, if one did


def fit(
    model: nn.Module, train_loader: DataLoader, val_loader: DataLoader, config: TrainerSettings,
    device: torch.device, *, stop: StopOnSignal | None = None, state_path: Path | None = None,
    best_path: Path | None = None, class_names: list[str] | None = None, class_weights: torch.Tensor | None = None,
    resume_state: dict | None = None,
    metadata: dict | None = None, on_epoch_end: Callable[[dict], bool | None] = lambda row: None,
    on_step: Callable[[int, dict[str, float]], None] = lambda step, values: None,
) -> FitResult:
    """Train with AdamW, the configured schedule and regularisation; validate after every epoch.

    The epoch with the lowest validation loss is saved to `best_path` (a checkpoint with `class_names`) whenever it
    improves; with `config.patience` training stops once that many epochs brought no improvement. The model ends
    with the weights `config.final_weights` names: the last finished epoch's, or that best epoch's. After each
    optimiser step `on_step(step, {"loss", "lr"})` runs (steps counted over the whole run), and after each epoch
    `on_epoch_end(row)` (a true return value stops training there, as patience would: the hyperparameter search
    prunes this way) and, with `state_path`, the whole training state (model, optimiser, schedule, RNG states,
    early-stopping state, history, `metadata`) is saved there atomically: finished work is on disk before the next
    epoch. `resume_state` (a loaded state) continues after its epoch, reproducing the uninterrupted run exactly.
    Once `stop` has caught SIGINT/SIGTERM the current epoch is abandoned and the model goes back to the last (or
    best) finished epoch, to its initial weights when none has finished. Rows hold epoch, train_loss, val_loss,
    val_accuracy, lr, the epoch's training and validation seconds (timed apart), the training seconds so far, and
    train_tokens (non-padding tokens).
    """
    require_decided(config, "trainer")
    # A run saved with AdamW stepping its whole model (before bigram tables learnt lazily: no table optimiser in its
    # last.pt) continues with it, and saves itself so again.
    optimizer, table_optimizer = make_optimizer(model, config, lazy_table=resume_state is None
                                                or resume_state.get("table_optimizer") is not None)
    steps_per_epoch = len(train_loader)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(
        step, config.epochs * steps_per_epoch, round(config.warmup_epochs * steps_per_epoch), config.schedule))
    generator = train_loader.generator  # the batch order's own RNG (see data.make_loader)
    history, first_epoch = [], 1
    best = {"epoch": None, "val_loss": math.inf, "model": _snapshot(model)}
    # The last finished epoch's weights: an epoch a signal cuts short is not reported half-trained.
    last = {"epoch": None, "model": best["model"]}

    def save_best(weights: dict | None = None) -> None:
        if best_path is not None:
            save_checkpoint(best_path, model, class_names or [], weights)

    if resume_state is not None:
        restore_training_state(resume_state, model=model, optimizer=optimizer, scheduler=scheduler,
                               loader_generator=generator, table_optimizer=table_optimizer)
        history, first_epoch, best = list(resume_state["history"]), resume_state["epoch"] + 1, resume_state["best"]
        last = {"epoch": resume_state["epoch"], "model": _snapshot(model)}
        if best["epoch"] is not None:  # the new run folder gets its best.pt too
            save_best(best["model"])

    def patience_ran_out(epoch: int) -> bool:
        return (config.patience is not None and best["epoch"] is not None and epoch < config.epochs
                and epoch - best["epoch"] >= config.patience)

    def finish(**outcome) -> FitResult:
        final = best if config.final_weights == "best" else last
        model.load_state_dict(final["model"])
        return FitResult(history, best_epoch=best["epoch"], reported_epoch=final["epoch"], **outcome)

    if history and patience_ran_out(history[-1]["epoch"]):  # stopped by a signal just as patience ran out
        return finish(stopped_early=True)

    # A caller that reports after training (train.py) holds `stop` across its reports too; alone, fit holds it.
    with nullcontext(stop) if stop is not None else StopOnSignal() as stop:
        for epoch in range(first_epoch, config.epochs + 1):
            row = _train_epoch(model, train_loader, (optimizer, table_optimizer), scheduler, config, device, epoch,
                               stop, class_weights, on_step)
            if stop.signal:
                return finish(interrupted=stop.signal)
            start = time.perf_counter()
            val = evaluate(model, val_loader, device, config.precision, class_weights)
            row |= {"val_loss": val.loss, "val_accuracy": val.accuracy, "eval_seconds": time.perf_counter() - start,
                    "elapsed_train_seconds": (history[-1]["elapsed_train_seconds"] if history else 0.0)
                    + row["train_seconds"]}
            improved = val.loss < best["val_loss"]
            last = {"epoch": epoch, "model": _snapshot(model)}
            if improved:
                best = {"epoch": epoch, "val_loss": val.loss, "model": last["model"]}
                save_best()
            log.info(f"epoch {epoch}/{config.epochs}: train_loss {row['train_loss']:.4f}  val_loss {val.loss:.4f}  "
                     f"val_accuracy {val.accuracy:.4f}  lr {row['lr']:.2e}  (train {row['train_seconds']:.1f}s, "
                     f"val {row['eval_seconds']:.1f}s)" + ("  *best*" if improved else ""))
            history.append(row)
            asked_to_stop = on_epoch_end(row)
            if state_path is not None:
                save_training_state(state_path, model=model, optimizer=optimizer, scheduler=scheduler,
                                    loader_generator=generator, epoch=epoch, history=history, best=best,
                                    metadata=metadata or {}, table_optimizer=table_optimizer)
            if stop.signal:  # arrived during validation: this epoch is complete and saved
                return finish(interrupted=stop.signal)
            if patience_ran_out(epoch):
                log.info(f"early stop: no lower validation loss for {config.patience} epochs; best was epoch "
                         f"{best['epoch']} ({best['val_loss']:.4f})")
                return finish(stopped_early=True)
            if asked_to_stop and epoch < config.epochs:
                log.info(f"stopped after epoch {epoch}, as the caller asked; best was epoch {best['epoch']}")
                return finish(stopped_early=True)
    return finish()


def training_objective(model: nn.Module, batch: dict[str, torch.Tensor], config: TrainerSettings,
                       device: torch.device, weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """What a training step minimises on `batch`, and the training loss the run reports: the cross-entropy (with
    the class `weights` and label smoothing); with R-Drop, the two passes' mean cross-entropy, and the objective adds
    config.rdrop times the divergence between their predictions (scripts/profile_step.py takes the same step)."""
    with autocast(device, config.precision):
        logits = model(batch["input_ids"], batch["padding_mask"])
        # R-Drop: a second pass draws other dropout (token dropout: another subset of each text).
        again = model(batch["input_ids"], batch["padding_mask"]) if config.rdrop else None
    loss = F.cross_entropy(logits.float(), batch["labels"], weight=weights, label_smoothing=config.label_smoothing)
    if again is None:
        return loss, loss
    loss = (loss + F.cross_entropy(again.float(), batch["labels"], weight=weights,
                                   label_smoothing=config.label_smoothing)) / 2
    return loss + config.rdrop * symmetric_kl(logits.float(), again.float()), loss


def symmetric_kl(logits: torch.Tensor, again: torch.Tensor) -> torch.Tensor:
    """R-Drop's term (Liang et al., 2021): the KL divergence between two passes' predictions, both ways, halved, and
    averaged over the texts. Two views of a text that must agree keep the model from leaning on any one subset of
    its tokens."""
    log_p, log_q = F.log_softmax(logits, dim=-1), F.log_softmax(again, dim=-1)  # (B, n_classes) each
    return (F.kl_div(log_p, log_q, log_target=True, reduction="batchmean")  # KL(q || p)
            + F.kl_div(log_q, log_p, log_target=True, reduction="batchmean")) / 2  # KL(p || q)


def clip_gradients(model: nn.Module, max_norm: float) -> None:
    """Scale every gradient so that their global norm is at most `max_norm`, as clip_grad_norm_ does, a sparse one
    (a lazily learnt bigram table's) included, whose norm clip_grad_norm_ cannot take."""
    parameters = [p for p in model.parameters() if p.grad is not None]
    if not any(p.grad.is_sparse for p in parameters):
        torch.nn.utils.clip_grad_norm_(parameters, max_norm)
        return
    for p in parameters:
        if p.grad.is_sparse:
            p.grad = p.grad.coalesce()  # each row once, so that its values hold the gradient's entries
    entries = [p.grad.values() if p.grad.is_sparse else p.grad for p in parameters]
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in entries]))
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)  # clip_grad_norm_'s factor
    for g in entries:
        g.mul_(scale)


def _snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def _train_epoch(model, loader, optimizers, scheduler, config: TrainerSettings, device, epoch: int,
                 stop: StopOnSignal, class_weights: torch.Tensor | None = None,
                 on_step: Callable[[int, dict[str, float]], None] = lambda step, values: None) -> dict:
    optimizer, table_optimizer = optimizers  # AdamW, and lazy Adam for a bigram table (or None)
    model.train()
    first_step = (epoch - 1) * len(loader)
    weights = None if class_weights is None else class_weights.to(device)
    start = time.perf_counter()
    total_loss, n_samples, n_tokens = 0.0, 0, 0
    lr = optimizer.param_groups[0]["lr"]
    # disable=None: a bar on a terminal only; redirected to a file, its redraws would bury the log.
    bar = tqdm(loader, desc=f"epoch {epoch}/{config.epochs}", leave=False, dynamic_ncols=True, disable=None)
    for step, batch in enumerate(bar, start=1):
        batch = _to(batch, device)
        objective, loss = training_objective(model, batch, config, device, weights)
        optimizer.zero_grad(set_to_none=True)
        if table_optimizer is not None:
            table_optimizer.zero_grad(set_to_none=True)
        objective.backward()
        if config.grad_clip is not None:
            clip_gradients(model, config.grad_clip)
        step_lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        if table_optimizer is not None:
            # The table follows the model's schedule: its rate is set from AdamW's before each step.
            table_optimizer.param_groups[0]["lr"] = step_lr
            table_optimizer.step()
        scheduler.step()
        value = loss.item()
        if not math.isfinite(value):
            raise DivergenceError(f"The training loss became {value} at epoch {epoch}, step {step}; training "
                                  "stopped. history.csv and last.pt keep the epochs finished before it. Lower "
                                  "trainer.lr (or check the data) and train again, in another folder or "
                                  "here with overwrite=true.")
        B = batch["labels"].size(0)
        total_loss += value * B
        n_samples += B
        n_tokens += int((~batch["padding_mask"]).sum())
        bar.set_postfix(loss=f"{value:.4f}")
        on_step(first_step + step, {"loss": value, "lr": step_lr})
        if stop.signal:
            break
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # epoch time must include the queued GPU work
    return {"epoch": epoch, "train_loss": total_loss / max(n_samples, 1), "lr": lr,
            "train_seconds": time.perf_counter() - start, "train_tokens": n_tokens}
