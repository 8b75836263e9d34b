"""Checkpoints round-trip, refuse code, and are never left half-written."""

from dataclasses import asdict

import pytest
import torch

from mha_textclf.errors import UserError
from mha_textclf.model import ModelConfig, TextClassifier
from mha_textclf.runs import checkpoint


def build(variant="naive", pe=True):
    torch.manual_seed(0)
    return TextClassifier(ModelConfig(vocab_size=50, n_classes=5, attention=variant, d_model=16, n_heads=4,
                                      mlp_hidden=32, pe=pe, max_length=32, pad_id=0, token_dropout=0.75,
                                      embedding_dropout=0.0, mlp_dropout=0.0, bigram_buckets=0)).eval()


def scheduler(optimizer):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)


def test_model_checkpoint_round_trip(tmp_path):
    model = build()
    checkpoint.save_checkpoint(tmp_path / "model.pt", model, ["a", "b", "c", "d", "e"])
    loaded, names = checkpoint.load_checkpoint(tmp_path / "model.pt")
    ids = torch.randint(5, 50, (3, 10))
    assert names == ["a", "b", "c", "d", "e"] and loaded.config == model.config
    torch.testing.assert_close(loaded(ids), model(ids))
    # In eval mode, as the docstring says: these 10-token inputs are below token_dropout_keep, so the outputs above
    # would match in training mode too, where a longer text would be seen through token dropout.
    assert not any(module.training for module in loaded.modules())


@pytest.mark.unit
def test_a_checkpoint_written_on_a_gpu_loads_on_the_cpu(tmp_path, monkeypatch):
    """predict runs on the CPU by default (`device=cpu`), also for models trained on a GPU. A
    checkpoint's tensors remember the device they were saved from; here they are tagged cuda:0 as a GPU run's are
    (torch.save records the tag), so that a load that did not map them to the CPU would fail on this CPU-only test."""
    model = build()
    with monkeypatch.context() as patch:
        patch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        checkpoint.save_checkpoint(tmp_path / "model.pt", model, ["a", "b", "c", "d", "e"])
    if not torch.cuda.is_available():  # (the tag is real: torch alone cannot restore it here)
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(tmp_path / "model.pt", weights_only=True)
    loaded, _ = checkpoint.load_checkpoint(tmp_path / "model.pt")
    assert {p.device.type for p in loaded.parameters()} == {"cpu"}
    ids = torch.randint(5, 50, (3, 10))
    torch.testing.assert_close(loaded(ids), model(ids))


class RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))  # would create the marker file if it were ever unpickled


@pytest.mark.unit
def test_checkpoint_holding_code_is_refused_without_running_it(tmp_path):
    path, marker = tmp_path / "model.pt", tmp_path / "pwned"
    torch.save({"format": checkpoint.CHECKPOINT_FORMAT, "payload": RunsCode(marker)}, path)
    with pytest.raises(UserError, match="not a checkpoint this project can load safely"):
        checkpoint.load_checkpoint(path)
    assert not marker.exists()


@pytest.mark.unit
def test_foreign_file_is_refused(tmp_path):
    torch.save({"weights": torch.zeros(3)}, tmp_path / "model.pt")
    with pytest.raises(UserError, match="not an mha-textclf checkpoint"):
        checkpoint.load_checkpoint(tmp_path / "model.pt")
    with pytest.raises(UserError, match="No checkpoint"):
        checkpoint.load_checkpoint(tmp_path / "missing.pt")


@pytest.mark.unit
def test_checkpoint_from_an_older_format_says_to_retrain(tmp_path):
    model = build()
    checkpoint.save_checkpoint(tmp_path / "model.pt", model, ["a", "b", "c", "d", "e"])
    saved = torch.load(tmp_path / "model.pt", weights_only=True)
    torch.save(saved | {"format": "mha-textclf/1"}, tmp_path / "old.pt")
    with pytest.raises(UserError, match=r"'mha-textclf/1': written by an older version .* train it again"):
        checkpoint.load_checkpoint(tmp_path / "old.pt")
    # A training state where a checkpoint belongs is named as such, not called old.
    torch.save(saved | {"format": checkpoint.TRAINING_STATE_FORMAT}, tmp_path / "last.pt")
    with pytest.raises(UserError, match="found 'mha-textclf-training-state/") as info:
        checkpoint.load_checkpoint(tmp_path / "last.pt")
    assert "older version" not in str(info.value)
    torch.save({"format": "mha-textclf-training-state/2"}, tmp_path / "old_last.pt")
    with pytest.raises(UserError, match="older version"):
        checkpoint.load_training_state(tmp_path / "old_last.pt")


@pytest.mark.unit
def test_a_failed_write_never_replaces_the_good_file(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    checkpoint.atomic_save({"epoch": 1, "w": torch.ones(4)}, path)
    real_save = torch.save

    def dies_half_way(obj, f):
        real_save(obj, f)
        f.truncate(f.tell() // 2)  # a partial write...
        raise OSError("disk full")  # ...then the process fails

    monkeypatch.setattr(torch, "save", dies_half_way)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.atomic_save({"epoch": 2, "w": torch.zeros(4)}, path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=True)["epoch"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # no temporary left behind


def test_a_truncated_training_state_is_a_clear_error(tmp_path):
    model = build()
    optimizer = torch.optim.AdamW(model.parameters())
    path = tmp_path / "last.pt"
    checkpoint.save_training_state(path, model=model, optimizer=optimizer, scheduler=scheduler(optimizer),
                             loader_generator=torch.Generator(), epoch=3, history=[{"epoch": 1}], best={},
                             metadata={"config": {}})
    assert checkpoint.load_training_state(path)["epoch"] == 3
    path.write_bytes(path.read_bytes()[:1000])  # as if killed mid-write without the atomic rename
    with pytest.raises(UserError, match="not a checkpoint this project can load safely"):
        checkpoint.load_training_state(path)


@pytest.mark.unit
def test_training_state_restores_rng_and_optimizer(tmp_path):
    model, generator = build(), torch.Generator().manual_seed(5)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randint(5, 50, (2, 6))).sum().backward()
    optimizer.step()
    torch.manual_seed(9)
    checkpoint.save_training_state(tmp_path / "last.pt", model=model, optimizer=optimizer,
                                   scheduler=scheduler(optimizer), loader_generator=generator, epoch=1, history=[],
                                   best={}, metadata={})
    expected = (torch.rand(3), torch.rand(3, generator=generator))

    other, other_generator = build(pe=True), torch.Generator()
    other_optimizer = torch.optim.AdamW(other.parameters(), lr=0.1)
    torch.manual_seed(123)
    checkpoint.restore_training_state(checkpoint.load_training_state(tmp_path / "last.pt"), model=other,
                                optimizer=other_optimizer, scheduler=scheduler(other_optimizer),
                                loader_generator=other_generator)
    assert torch.equal(torch.rand(3), expected[0])
    assert torch.equal(torch.rand(3, generator=other_generator), expected[1])
    for a, b in zip(model.parameters(), other.parameters(), strict=True):
        assert torch.equal(a, b)
    assert other_optimizer.state_dict()["state"][0]["step"] == 1


@pytest.mark.unit
def test_a_gpu_run_s_training_state_keeps_its_cuda_rng_states_and_restores_them_where_a_gpu_is(tmp_path,
                                                                                                 monkeypatch):
    """`last.pt` holds the RNG states, so that a continued run draws what the uninterrupted one would:
    on a GPU, CUDA's generators too (dropout draws there). Faked here: torch.cuda says a GPU is present and hands out
    two devices' states; last.pt must hold them, and restoring must hand them back to CUDA, where a GPU is, and skip
    them on a CPU-only machine, where the same file must still resume."""
    cuda_states = [torch.arange(16, dtype=torch.uint8), torch.arange(16, 32, dtype=torch.uint8)]
    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [s.clone() for s in cuda_states])
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: restored.append([s.clone() for s in states]))
    model = build()
    optimizer = torch.optim.AdamW(model.parameters())
    checkpoint.save_training_state(tmp_path / "last.pt", model=model, optimizer=optimizer,
                                   scheduler=scheduler(optimizer), loader_generator=torch.Generator(), epoch=1,
                                   history=[], best={}, metadata={})
    state = checkpoint.load_training_state(tmp_path / "last.pt")
    assert [s.tolist() for s in state["rng"]["cuda"]] == [s.tolist() for s in cuda_states]

    def restore():
        other = build()
        other_optimizer = torch.optim.AdamW(other.parameters())
        checkpoint.restore_training_state(state, model=other, optimizer=other_optimizer,
                                    scheduler=scheduler(other_optimizer), loader_generator=torch.Generator())

    restore()
    assert [[s.tolist() for s in states] for states in restored] == [[s.tolist() for s in cuda_states]]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same file on a CPU-only machine
    restore()
    assert len(restored) == 1


def test_the_same_weights_make_the_same_file(tmp_path):
    """A checkpoint's bytes are the same whatever temporary name it was written under (the archive inside names no
    file), so two runs of the same training leave byte-identical model.pt files."""
    state = {"epoch": 1, "w": torch.arange(4.0)}
    checkpoint.atomic_save(state, tmp_path / "a.pt")
    checkpoint.atomic_save(state, tmp_path / "b.pt")
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "b.pt").read_bytes()


def saved_before(model: TextClassifier, key: str, folder) -> dict:
    """`model` saved as a checkpoint from before the model setting `key` existed (its config without the key), as
    folder/before.pt; returns that config."""
    checkpoint.save_checkpoint(folder / "model.pt", model, list("abcde"))
    saved = torch.load(folder / "model.pt", weights_only=True)
    before = {k: v for k, v in saved["model_config"].items() if k != key}
    torch.save(saved | {"model_config": before}, folder / "before.pt")
    return before


@pytest.mark.unit
def test_a_checkpoint_saved_before_bigrams_existed_loads_as_the_model_without_them(tmp_path):
    """model_config without bigram_buckets (saved before the setting was added): the same model, without bigrams,
    computing what it computed; a config that names a bigram table gets one."""
    model = build()
    before = saved_before(model, "bigram_buckets", tmp_path)
    loaded, _ = checkpoint.load_checkpoint(tmp_path / "before.pt")
    ids = torch.randint(5, 50, (3, 10))
    assert loaded.bigrams is None and loaded.config.bigram_buckets == 0
    torch.testing.assert_close(loaded(ids), model(ids))
    with_bigrams = TextClassifier(ModelConfig(**before | {"bigram_buckets": 64}))
    checkpoint.save_checkpoint(tmp_path / "bigrams.pt", with_bigrams, list("abcde"))
    assert checkpoint.load_checkpoint(tmp_path / "bigrams.pt")[0].config.bigram_buckets == 64


@pytest.mark.unit
def test_a_pe_checkpoint_saved_before_the_gate_existed_loads_with_the_encoding_added_whole(tmp_path):
    """model_config without pe_gate: the encoding was added whole, and the loaded model adds it so (no scale in its
    weights); a gated model's scale is saved and loaded with the weights."""
    torch.manual_seed(0)
    whole = TextClassifier(ModelConfig(**asdict(build().config) | {"pe_gate": False}))
    saved_before(whole, "pe_gate", tmp_path)
    loaded, _ = checkpoint.load_checkpoint(tmp_path / "before.pt")
    ids = torch.randint(5, 50, (3, 10))
    assert loaded.config.pe_gate is False and loaded.positional.scale is None
    torch.testing.assert_close(loaded(ids), whole.eval()(ids), atol=0, rtol=0)
    gated = build()
    with torch.no_grad():
        gated.positional.scale.fill_(0.25)
    checkpoint.save_checkpoint(tmp_path / "gated.pt", gated, list("abcde"))
    assert checkpoint.load_checkpoint(tmp_path / "gated.pt")[0].positional.scale.item() == 0.25
