"""Loaders for the bundled data and for local paper data sets, on tiny files written here."""

import pickle

import numpy as np
import pytest

from damcha.inputs.datasets import DataError, load_dataset
from damcha.inputs.datasets.cifar import read_cifar_batch, read_cifar_folder
from damcha.inputs.datasets.text import (
    CORPUS_FILE,
    CORPUS_SHA256,
    bundled_corpus,
    decode_bytes,
    encode_text,
    load_text_file,
)
from damcha.inputs.modalities.digit_image import DIGIT_START
from damcha.inputs.modalities.image_patches import cifar_patches


def test_digits_are_65_token_sequences_with_a_fixed_split():
    d = load_dataset("digits")
    assert d.train_inputs.shape[1] == 64 and (d.train_inputs[:, 0] == DIGIT_START).all()
    assert int(d.train_inputs[:, 1:].max()) <= 16
    assert (d.train_inputs[:, 1:] == d.train_targets[:, :-1]).all()
    assert len(d.train_inputs) + len(d.val_inputs) == 1797
    again = load_dataset("digits")
    assert (again.val_inputs == d.val_inputs).all()
    assert d.split["val_indices"] != load_dataset("digits", split_seed=1).split["val_indices"]
    cls = load_dataset("digits-cls")
    assert cls.train_inputs.shape[1] == 64 and set(cls.val_targets.tolist()) == set(range(10))


def test_bundled_corpus_and_bytes_round_trip():
    corpus = bundled_corpus()
    assert len(corpus) > 400_000
    assert decode_bytes(encode_text("naïve ∑ text")) == "naïve ∑ text"
    d = load_dataset("text", block_size=64)
    assert d.stream and d.task == "next_token" and d.vocab_size == 256 and len(d.val_stream) > 40_000
    assert d.split["sha256"] == CORPUS_SHA256 and d.split["bytes"] == len(corpus) == 466_273


def test_a_changed_or_missing_corpus_is_refused_by_its_checksum(tmp_path):
    changed = tmp_path / "pydoc_topics.txt"
    data = bytearray(CORPUS_FILE.read_bytes())
    data[1000] ^= 1  # one bit
    changed.write_bytes(bytes(data))
    with pytest.raises(DataError, match="was changed .*restore it from git"):
        bundled_corpus(changed)
    with pytest.raises(DataError, match="cannot be read"):
        bundled_corpus(tmp_path / "absent.txt")
    import hashlib

    assert hashlib.sha256(CORPUS_FILE.read_bytes()).hexdigest() == CORPUS_SHA256  # the shipped copy is intact


def test_text_file(tmp_path):
    (tmp_path / "t.txt").write_text("hello world. " * 100)
    assert load_text_file(tmp_path / "t.txt", 16).vocab_size == 256
    with pytest.raises(DataError, match="no such file"):
        load_text_file(tmp_path / "missing.txt", 16)
    (tmp_path / "short.txt").write_text("hi")
    with pytest.raises(DataError, match="too short"):
        load_text_file(tmp_path / "short.txt", 16)


def _write_cifar(path, n=6, fine=False):
    rng = np.random.default_rng(0)
    key = b"fine_labels" if fine else b"labels"
    batch = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), key: list(range(n)), b"batch_label": b"test"}
    path.write_bytes(pickle.dumps(batch, protocol=2))
    return batch


def test_cifar_python_batches(tmp_path):
    d10 = tmp_path / "cifar-10-batches-py"
    d10.mkdir()
    batch = _write_cifar(d10 / "data_batch_1")
    _write_cifar(d10 / "test_batch", n=3)
    images, labels = read_cifar_batch(d10 / "data_batch_1")
    assert images.shape == (6, 32, 32, 3) and labels.tolist() == list(range(6))
    assert images[0, 0, 0, 0] == batch[b"data"][0, 0] and images[0, 0, 0, 1] == batch[b"data"][0, 1024]
    folder = read_cifar_folder(d10, "cifar10", nonstandard_ok=True)
    assert folder.train_images.shape == (6, 32, 32, 3) and folder.test_images.shape == (3, 32, 32, 3)
    assert not folder.standard and set(folder.md5) == {"data_batch_1", "test_batch"}
    np.testing.assert_allclose(cifar_patches(images)[0, 0, :3], images[0, 0, 0] / 255.0, rtol=1e-6)
    d100 = tmp_path / "cifar-100-python"
    d100.mkdir()
    _write_cifar(d100 / "train", fine=True)
    _write_cifar(d100 / "test", fine=True)
    assert read_cifar_folder(d100, "cifar100", nonstandard_ok=True).train_images.shape == (6, 32, 32, 3)


def test_cifar_errors_and_hostile_pickles(tmp_path):
    with pytest.raises(DataError, match="no such directory"):
        read_cifar_folder(tmp_path / "nope")
    (tmp_path / "data_batch_1").write_bytes(b"not a pickle at all")
    with pytest.raises(DataError, match="not a CIFAR python batch"):
        read_cifar_batch(tmp_path / "data_batch_1")

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    (tmp_path / "evil").write_bytes(pickle.dumps({b"data": Evil()}))
    with pytest.raises(DataError, match="refused"):
        read_cifar_batch(tmp_path / "evil")
    (tmp_path / "wrong").write_bytes(pickle.dumps({b"data": np.zeros((2, 10), np.uint8), b"labels": [0, 1]}))
    with pytest.raises(DataError, match=r"\(N, 3072\)"):
        read_cifar_batch(tmp_path / "wrong")


def test_unknown_dataset_and_missing_path():
    with pytest.raises(DataError, match="unknown data set"):
        load_dataset("imagenet")
    with pytest.raises(DataError, match="--data-path"):
        load_dataset("enwik8")


def test_cifar_next_patch_training_end_to_end(tmp_path):
    """A tiny CIFAR-10 folder in the python batch format -> next-patch MSE training -> snapshots that
    load -> inspection of a validation image."""
    import torch

    from damcha import ModelConfig, inspect_input
    from damcha.runs.checkpoints import load_model, load_run
    from damcha.runs.train import TrainConfig, train

    d = tmp_path / "cifar-10-batches-py"
    d.mkdir()
    rng = np.random.default_rng(0)
    smooth = np.repeat(np.repeat(rng.integers(0, 256, (40, 3, 8, 8), dtype=np.uint8), 4, axis=2), 4, axis=3)
    batch = {b"data": smooth.reshape(40, 3072), b"labels": list(rng.integers(0, 10, 40))}
    (d / "data_batch_1").write_bytes(pickle.dumps(batch, protocol=2))
    (d / "test_batch").write_bytes(pickle.dumps({b"data": smooth[:8].reshape(8, 3072), b"labels": list(range(8))}))
    cfg = ModelConfig(n_layer=1, n_head=2, n_embd=16, attention_options={"generator_widths": (16,)})
    result = train(cfg, TrainConfig(dataset="cifar10", data_path=str(d), epochs=3, batch_size=8, lr=1e-2,
                                    nonstandard_data=True),
                   tmp_path / "run", progress=False)
    rows = result.metrics
    assert rows[-1]["val_mse"] < rows[0]["val_mse"] and "val_nll" not in rows[-1]
    run = load_run(tmp_path / "run")
    assert run.model_config.input_dim == 48 and run.model_config.causal
    model = load_model(run)
    ds = load_dataset("cifar10", str(d), nonstandard_ok=True)
    rec = inspect_input(model, ds.val_inputs[0].numpy(), ds.val_targets[0].numpy())
    assert rec.values("metric").shape == (1, 64, 16, 16) and rec.token_loss.shape == (64,)
    with torch.no_grad():
        direct = float(((model(ds.val_inputs[:1]).logits - ds.val_targets[:1]) ** 2).mean())
    assert rec.loss == pytest.approx(direct, rel=1e-5)
    assert torch.equal(ds.val_inputs[0, 0], torch.zeros(48))  # the zero start vector
