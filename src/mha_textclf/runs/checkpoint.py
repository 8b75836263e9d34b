"""Checkpoints: `model.pt` (weights + what rebuilds the model) and `last.pt` (all a resumed run needs).

Both are written atomically (temporary file, fsync, rename), so a kill mid-write leaves the previous good file, and
both hold only tensors and plain Python types, so they load with `torch.load(weights_only=True)`: nothing in a
checkpoint file is ever executed.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from mha_textclf.errors import UserError
from mha_textclf.model import ModelConfig, TextClassifier
from mha_textclf.runs.files import write_atomically
from mha_textclf.settings import ADDED_SINCE

# Bumped whenever the same file would mean something else: /2 (and state /3) scale the embeddings by √d_model;
# state /4 times training and validation apart in its history; /3 (state /5): positional encoding enters the
# attention's queries and keys only, so the same pe=true weights compute another function.
CHECKPOINT_FORMAT = "mha-textclf/3"
TRAINING_STATE_FORMAT = "mha-textclf-training-state/5"


def atomic_save(obj: dict, path: Path) -> None:
    """`torch.save`, whole or not at all (runs/files.py): readers see the old file or the new, never half."""
    def save(tmp: Path) -> None:
        # Through a file object: given a path, torch names the archive's folder after the file (here the temporary
        # name), and the same weights would make other bytes in every run.
        with tmp.open("wb") as f:
            torch.save(obj, f)

    write_atomically(path, save)


def _load(path: Path, device, what: str) -> dict:
    if not path.is_file():
        raise UserError(f"No {what} at {path}; pass the folder of a training run.")
    try:
        obj = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:
        raise UserError(f"{path} is not a checkpoint this project can load safely ({type(e).__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else 'no detail'}). If it was cut short, use the "
                        "run's other checkpoint or train again.") from e
    return obj


def _format_hint(obj, expected: str) -> str:
    """What the file holds instead, and what to do when it is an older version of the expected format."""
    found = obj.get("format") if isinstance(obj, dict) else None
    if not isinstance(found, str):
        return ""
    family, _, version = found.rpartition("/")
    expected_family, _, expected_version = expected.rpartition("/")
    if family == expected_family and version.isdigit() and int(version) < int(expected_version):
        return f", found {found!r}: written by an older version whose model computes differently; train it again"
    return f", found {found!r}"


def save_checkpoint(path: Path, model: TextClassifier, class_names: list[str],
                    state_dict: dict | None = None) -> None:
    """The model's weights (or `state_dict`, weights for the same model) and what rebuilds it."""
    atomic_save({"format": CHECKPOINT_FORMAT, "model_config": asdict(model.config), "class_names": list(class_names),
                 "state_dict": state_dict if state_dict is not None else model.state_dict()}, path)


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> tuple[TextClassifier, list[str]]:
    """Rebuild a model saved by `save_checkpoint`, on `device`, in eval mode."""
    path = Path(path)
    checkpoint = _load(path, device, "checkpoint")
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != CHECKPOINT_FORMAT:
        raise UserError(f"{path} is not an mha-textclf checkpoint (expected format {CHECKPOINT_FORMAT!r}"
                        f"{_format_hint(checkpoint, CHECKPOINT_FORMAT)}).")
    # A checkpoint from before a model setting was added was trained without what it adds.
    added = {key.removeprefix("model."): value for key, value in ADDED_SINCE.items() if key.startswith("model.")}
    model = TextClassifier(ModelConfig(**added | checkpoint["model_config"]))
    try:
        model.load_state_dict(checkpoint["state_dict"])
    except RuntimeError as e:
        raise UserError(f"The weights in {path} do not match its own model config: {e}") from e
    return model.to(device).eval(), checkpoint["class_names"]


def save_training_state(path: Path, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                        scheduler: torch.optim.lr_scheduler.LRScheduler, loader_generator: torch.Generator,
                        epoch: int, history: list[dict], best: dict, metadata: dict,
                        table_optimizer: torch.optim.Optimizer | None = None) -> None:
    """Everything needed to continue after `epoch` exactly as if training had never stopped.

    The loop draws random numbers only from torch (dropout: the global generator, batch order: the loader's own), so
    those generators' states are all the randomness there is to save. `best` is the early-stopping state: the best
    epoch so far, its validation loss and its weights. `table_optimizer` is the lazy Adam of a bigram table; None
    (or no key, in a state saved before tables learnt lazily): `optimizer` steps the whole model.
    """
    atomic_save({
        "format": TRAINING_STATE_FORMAT, "epoch": epoch, "history": history, "best": best, "metadata": metadata,
        "model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
        "table_optimizer": table_optimizer.state_dict() if table_optimizer is not None else None,
        "rng": {"torch": torch.get_rng_state(), "loader": loader_generator.get_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
    }, path)


def load_training_state(path: Path, device: str | torch.device = "cpu") -> dict:
    state = _load(path, device, "training state (last.pt)")
    if not isinstance(state, dict) or state.get("format") != TRAINING_STATE_FORMAT:
        raise UserError(f"{path} is not an mha-textclf training state (expected format {TRAINING_STATE_FORMAT!r}"
                        f"{_format_hint(state, TRAINING_STATE_FORMAT)}).")
    return state


def restore_training_state(state: dict, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                           scheduler: torch.optim.lr_scheduler.LRScheduler, loader_generator: torch.Generator,
                           table_optimizer: torch.optim.Optimizer | None = None) -> None:
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if table_optimizer is not None:
            table_optimizer.load_state_dict(state["table_optimizer"])
    except (RuntimeError, ValueError) as e:
        raise UserError(f"The training state to resume does not fit this model ({str(e).splitlines()[0]}); "
                        "resume with the run's own settings.") from e
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"]["torch"].cpu())
    loader_generator.set_state(state["rng"]["loader"].cpu())
    if state["rng"]["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["rng"]["cuda"]])
