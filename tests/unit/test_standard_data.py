"""The standard data files: enwik8/text8 on their 90M/5M/5M split (raw or zipped, memory-mapped) and
CIFAR on its published batches, each copy checked against the published checksums; generated files
in the real formats stand in for the published ones."""

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from damcha.inputs.datasets import DataError, load_dataset
from damcha.inputs.datasets import benchmark_corpora as corpora
from damcha.inputs.datasets.checksums import PublishedFile, file_digests
from damcha.inputs.datasets.generated import cifar_batch, enwik8_like


def _zip(path, member: str, data: bytes, compression=zipfile.ZIP_DEFLATED):
    with zipfile.ZipFile(path, "w", compression) as z:
        z.writestr(member, data)
    return path


def test_a_copy_that_differs_from_the_published_file_is_refused_in_words(tmp_path):
    (tmp_path / "enwik8").write_bytes(enwik8_like(30_000))
    with pytest.raises(DataError, match=r"not the published enwik8 — it is 30,000 bytes.*100,000,000 bytes, "
                                        r"MD5 a1fa5ffddb56f4953e226637dabbb36a.*--nonstandard-data"):
        load_dataset("enwik8", str(tmp_path / "enwik8"), 16)


def test_a_nonstandard_copy_is_split_90_5_5_memory_mapped_and_says_so(tmp_path):
    data = enwik8_like(40_000)
    (tmp_path / "enwik8").write_bytes(data)
    d = load_dataset("enwik8", str(tmp_path / "enwik8"), 16, nonstandard_ok=True)
    assert d.split["standard_files"] is False and "nonstandard" in d.split["split"]
    assert (d.split["train_bytes"], d.split["val_bytes"], d.split["test_bytes"]) == (36_000, 2_000, 2_000)
    assert d.split["sha256"] == hashlib.sha256(data).hexdigest() and d.split["md5"] == hashlib.md5(data).hexdigest()
    assert bytes(d.train_stream.numpy()) + bytes(d.val_stream.numpy()) + bytes(d.test_stream.numpy()) == data
    assert d.train_stream.dtype.itemsize == 1  # bytes stay bytes; a window becomes int64 when cut
    import torch

    from damcha.inputs.datasets import windows

    x, y = windows(d.train_stream, 16, torch.tensor([0, 5]))
    assert x.dtype == torch.int64 and bytes(x[1].tolist()) == data[5:21] and bytes(y[1].tolist()) == data[6:22]


def test_the_zip_is_read_directly_and_extracted_once(tmp_path, monkeypatch):
    monkeypatch.setenv("DAMCHA_CACHE", str(tmp_path / "cache"))
    data = enwik8_like(30_000, seed=1)
    (tmp_path / "enwik8").write_bytes(data)
    archive = _zip(tmp_path / "enwik8.zip", "enwik8", data)
    raw = load_dataset("enwik8", str(tmp_path / "enwik8"), 16, nonstandard_ok=True)
    zipped = load_dataset("enwik8", str(archive), 16, nonstandard_ok=True)
    assert zipped.split["sha256"] == raw.split["sha256"] and zipped.split["source"].endswith("enwik8.zip:enwik8")
    assert np.array_equal(zipped.test_stream.numpy(), raw.test_stream.numpy())
    extracted = [p for p in (tmp_path / "cache" / "extracted").iterdir() if p.suffix != ".digests"]
    assert len(extracted) == 1
    stamp = extracted[0].stat().st_mtime_ns
    load_dataset("enwik8", str(archive), 16, nonstandard_ok=True)
    assert extracted[0].stat().st_mtime_ns == stamp  # the second read maps the extracted copy


def test_bad_zips_and_wrong_files_are_refused_before_anything_trains(tmp_path, monkeypatch):
    monkeypatch.setenv("DAMCHA_CACHE", str(tmp_path / "cache"))
    other = _zip(tmp_path / "other.zip", "readme.txt", b"hello")
    with pytest.raises(DataError, match="a zip without the member 'enwik8' .*readme.txt"):
        load_dataset("enwik8", str(other), 16, nonstandard_ok=True)
    data = enwik8_like(50_000, seed=2)
    damaged = bytearray(_zip(tmp_path / "enwik8.zip", "enwik8", data).read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF  # inside the deflated member: its CRC no longer matches
    (tmp_path / "damaged.zip").write_bytes(bytes(damaged))
    with pytest.raises(DataError, match="damaged|cannot be read|not a readable zip"):
        load_dataset("enwik8", str(tmp_path / "damaged.zip"), 16, nonstandard_ok=True)
    assert not list((tmp_path / "cache" / "extracted").glob("*partial*"))  # nothing half-written is left
    (tmp_path / "text8").write_bytes(b" anarchism originated as a term " * 2000)
    with pytest.raises(DataError, match="not enwik8 .*'<mediawiki'"):
        load_dataset("enwik8", str(tmp_path / "text8"), 16, nonstandard_ok=True)
    (tmp_path / "enwik8").write_bytes(data)
    with pytest.raises(DataError, match=r"not text8 \(byte 60 at or after offset 0"):
        load_dataset("text8", str(tmp_path / "enwik8"), 16, nonstandard_ok=True)
    assert load_dataset("text8", str(tmp_path / "text8"), 16, nonstandard_ok=True).name == "text8"
    with pytest.raises(DataError, match="no such file"):
        load_dataset("text8", str(tmp_path / "absent"), 16)
    (tmp_path / "tiny").write_bytes(b"<mediawiki>" + b"x" * 200)
    with pytest.raises(DataError, match="shorter than one window"):
        load_dataset("enwik8", str(tmp_path / "tiny"), 16, nonstandard_ok=True)


def test_a_file_with_the_published_checksums_gets_the_standard_split(tmp_path):
    """A generated 100,000,000-byte file stands in for enwik8: with its digests as the published ones,
    it is split at exactly 90,000,000 and 95,000,000 bytes and recorded as the standard file."""
    data = enwik8_like(100_000_000, seed=3)
    path = tmp_path / "enwik8"
    path.write_bytes(data)
    found = file_digests(path)
    published = PublishedFile("enwik8", "this test", 100_000_000, md5=found["md5"], sha1=found["sha1"])
    stand_in = corpora.Enwik8(published, "enwik8", corpora.ENWIK8.expected_content)
    d = corpora.load_benchmark_corpus(stand_in, path, 512, nonstandard_ok=False)
    assert d.split["standard_files"] is True and d.split["split"].startswith("the standard split")
    assert (d.split["val_start"], d.split["test_start"]) == (90_000_000, 95_000_000)
    assert len(d.train_stream) == 90_000_000 and len(d.val_stream) == len(d.test_stream) == 5_000_000
    assert bytes(d.test_stream[:64].numpy()) == data[95_000_000:95_000_064]
    del data


def test_training_validates_on_the_validation_split_and_tests_once_at_the_end(tmp_path):
    from damcha import ModelConfig
    from damcha.runs.checkpoints import load_run
    from damcha.runs.evaluation import test_tensors
    from damcha.runs.train import TrainConfig, train
    from damcha.views.display_units import test_loss

    (tmp_path / "enwik8").write_bytes(enwik8_like(60_000, seed=4))
    cfg = ModelConfig(n_layer=1, n_head=2, n_embd=16, attention_options={"generator_widths": (8,)}, block_size=32)
    tcfg = TrainConfig(dataset="enwik8", data_path=str(tmp_path / "enwik8"), epochs=2, batch_size=8,
                       steps_per_epoch=3, val_windows=8)
    with pytest.raises(DataError, match="--nonstandard-data"):
        train(cfg, tcfg, tmp_path / "refused", progress=False)
    assert not (tmp_path / "refused").exists()  # refused before anything was written
    import dataclasses

    result = train(cfg, dataclasses.replace(tcfg, nonstandard_data=True), tmp_path / "run", progress=False)
    run = load_run(tmp_path / "run")
    assert run.data["standard_files"] is False and run.train_config["nonstandard_data"] is True
    assert all("test_nll" not in row for row in result.metrics)  # never evaluated while training
    saved = json.loads((tmp_path / "run" / "test.json").read_text())
    assert run.test == saved and saved["epoch"] == 2 and saved["test_bits_per_char"] > 0
    from damcha.runs.checkpoints import load_model
    from damcha.runs.evaluation import evaluate

    data = load_dataset("enwik8", str(tmp_path / "enwik8"), 32, nonstandard_ok=True)
    x, y = test_tensors(data)
    assert len(x) == (len(data.test_stream) - 1) // 32  # every non-overlapping window of the test bytes
    assert saved["test_nll"] == pytest.approx(evaluate(load_model(run), x, y)["nll"], rel=1e-6)
    assert test_loss(run).endswith("(epoch 2)") and "bits" in test_loss(run)

    from streamlit.testing.v1 import AppTest  # the model card says what the run was trained and tested on

    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py"), default_timeout=120)
    at.session_state["checkpoint_root"] = str(tmp_path)
    at.query_params["run"] = "run"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    card = " ".join(m.value for m in at.markdown)
    assert "90% / 5% / 5% of a nonstandard copy" in card and "standard files: no" in card
    assert f"{test_loss(run)}, evaluated once after training" in card


def test_cifar_batches_are_checked_against_their_published_md5s(tmp_path):
    d = tmp_path / "cifar-10-batches-py"
    d.mkdir()
    for i in range(1, 6):
        cifar_batch(d / f"data_batch_{i}", 8, i)
    cifar_batch(d / "test_batch", 6, 0)
    with pytest.raises(DataError, match=r"not the published cifar10 data_batch_1 .*MD5 c99cafc152244af753f735de768cd75f"):
        load_dataset("cifar10", str(d))
    (d / "data_batch_5").unlink()
    with pytest.raises(DataError, match="missing data_batch_5 .*--nonstandard-data"):
        load_dataset("cifar10", str(d))
    data = load_dataset("cifar10", str(d), split_seed=1, nonstandard_ok=True)
    assert data.split["standard_files"] is False and set(data.split["md5"]) == {f"data_batch_{i}" for i in range(1, 5)} | {"test_batch"}
    assert (data.split["n_train"], data.split["n_val"], data.split["n_test"]) == (29, 3, 6)
    assert data.train_inputs.shape == (29, 64, 48) and data.test_targets.shape == (6, 64, 48)
    again = load_dataset("cifar10", str(d), split_seed=1, nonstandard_ok=True)
    other = load_dataset("cifar10", str(d), split_seed=2, nonstandard_ok=True)
    assert np.array_equal(again.val_targets, data.val_targets) and not np.array_equal(other.val_targets, data.val_targets)
    # the lazy training rows and the validation rows are the patches of the training images, each once
    from damcha.inputs.datasets.cifar import read_cifar_folder
    from damcha.inputs.modalities.image_patches import cifar_patches

    rows = np.concatenate([data.train_targets[:].numpy(), data.val_targets.numpy()])
    every = cifar_patches(read_cifar_folder(d, "cifar10", nonstandard_ok=True).train_images)
    assert sorted(r.tobytes() for r in rows) == sorted(r.tobytes() for r in every)
    assert np.array_equal(data.train_inputs[3][1:], data.train_targets[3][:-1])  # next-patch pairs, made per batch


def test_a_published_cifar_folder_reads_as_standard(tmp_path, monkeypatch):
    """With a generated folder's MD5s as the published list, the same folder reads as the standard files."""
    from damcha.inputs.datasets import cifar

    d = tmp_path / "cifar-100-python"
    d.mkdir()
    cifar_batch(d / "train", 20, 1, key=b"fine_labels")
    cifar_batch(d / "test", 5, 2, key=b"fine_labels")
    monkeypatch.setitem(cifar.PUBLISHED, "cifar100", ({"train": file_digests(d / "train")["md5"]},
                                                      {"test": file_digests(d / "test")["md5"]}))
    data = load_dataset("cifar100", str(d))
    assert data.split["standard_files"] is True and data.split["n_val"] == 2


def test_the_train_command_takes_nonstandard_data_as_a_switch():
    import argparse

    from damcha.runs.train_flags import add_settings_flags, settings_from

    parser = argparse.ArgumentParser()
    add_settings_flags(parser)
    assert settings_from(parser.parse_args(["--nonstandard-data"]))[1].nonstandard_data is True
    assert settings_from(parser.parse_args([]))[1].nonstandard_data is False
    assert settings_from(parser.parse_args(["--no-nonstandard-data"]))[1].nonstandard_data is False


def test_the_standard_files_command_writes_the_rehearsals_files_into_a_new_folder_only(tmp_path, capsys):
    from damcha.__main__ import main

    assert main(["standard-files", "--out", str(tmp_path / "data")]) == 0
    assert "--data-dir" in capsys.readouterr().out
    assert {p.name for p in (tmp_path / "data").iterdir()} == {"cifar-10-batches-py", "enwik8.zip", "text8"}
    before = (tmp_path / "data" / "text8").read_bytes()
    assert main(["standard-files", "--out", str(tmp_path / "data")]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "data" / "text8").read_bytes() == before
