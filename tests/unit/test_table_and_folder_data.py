"""Images and text in the files users keep them in — Hugging Face parquet shards, `save_to_disk`
Arrow folders, image folders — written here in those formats; pickles refused in words."""

import io
import json
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from damcha.inputs.datasets import DataError, load_dataset
from damcha.inputs.modalities.image_patches import cifar_patches


def _png(rng, side=32) -> tuple[bytes, np.ndarray]:
    pixels = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue(), pixels


def _image_table(n, seed, image_column="img"):
    rng = np.random.default_rng(seed)
    encoded, pixels = zip(*(_png(rng) for _ in range(n)))
    images = pa.array([{"bytes": b, "path": None} for b in encoded],
                      type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    return pa.table({image_column: images, "label": pa.array(rng.integers(0, 10, n), pa.int64())}), np.stack(pixels)


def _write_arrow_stream(path, table):
    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)


def test_hugging_face_parquet_shards_are_read_split_by_split(tmp_path):
    folder = tmp_path / "cifar10" / "plain_text"
    folder.mkdir(parents=True)
    train, train_pixels = _image_table(30, 0)
    test, test_pixels = _image_table(6, 1)
    pq.write_table(train, folder / "train-00000-of-00001.parquet", row_group_size=8)
    pq.write_table(test, folder / "test-00000-of-00001.parquet")
    data = load_dataset("parquet-images", str(tmp_path / "cifar10"), split_seed=3)
    assert (data.split["n_train"], data.split["n_val"], data.split["n_test"]) == (27, 3, 6)
    assert "carved from the training images with split seed 3" in data.split["split"]
    np.testing.assert_array_equal(data.test_targets[:].numpy(), cifar_patches(test_pixels))  # PNG is lossless
    rows = np.concatenate([data.train_targets[:].numpy(), data.val_targets.numpy()])
    assert sorted(r.tobytes() for r in rows) == sorted(r.tobytes() for r in cifar_patches(train_pixels))
    assert data.val_labels is not None and len(data.val_labels) == 3


def test_a_save_to_disk_folder_and_its_validation_split(tmp_path):
    root = tmp_path / "saved"
    for split, n, seed in (("train", 12, 0), ("validation", 4, 1), ("test", 5, 2)):
        table, _ = _image_table(n, seed, image_column="image")
        _write_arrow_stream(root / split / "data-00000-of-00001.arrow", table)
        (root / split / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    (root / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "validation", "test"]}))
    data = load_dataset("parquet-images", str(root))
    assert (data.split["n_train"], data.split["n_val"], data.split["n_test"]) == (12, 4, 5)
    assert "(the validation split)" in data.split["split"]


def test_text_columns_become_a_memory_mapped_byte_corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("DAMCHA_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "wikitext"
    folder.mkdir()
    lines = {s: [f" = {s} heading {i} = \n" if i % 5 == 0 else f"{s} line {i} of the text" for i in range(n)]
             for s, n in (("train", 400), ("validation", 40), ("test", 40))}
    for s, rows in lines.items():
        pq.write_table(pa.table({"text": rows}), folder / f"{s}-00000-of-00001.parquet")
    data = load_dataset("parquet-text", str(folder), block_size=16)
    expected = "".join(r if r.endswith("\n") else r + "\n" for r in lines["validation"]).encode()
    assert bytes(data.val_stream.numpy()) == expected and data.train_stream.dtype.itemsize == 1
    assert data.has_test and data.split["sha256"]["train"]
    only_train = tmp_path / "one.parquet"
    pq.write_table(pa.table({"text": lines["train"]}), only_train)
    carved = load_dataset("parquet-text", str(only_train), block_size=16)
    assert not carved.has_test and "last 5% of the training text" in carved.split["split"]


def test_wrong_columns_pickles_and_unnamed_splits_are_refused_in_words(tmp_path):
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"pixels": [1, 2, 3], "y": [0, 1, 0]}), other)
    with pytest.raises(DataError, match=r"no image column \(expected one of img, image; found pixels \(int64\), y"):
        load_dataset("parquet-images", str(other))
    with pytest.raises(DataError, match="no text column"):
        load_dataset("parquet-text", str(other))
    pickled = tmp_path / "frame.pkl"
    pickled.write_bytes(pickle.dumps({"text": ["a", "b"]}, protocol=4))
    with pytest.raises(DataError, match="pickled data .* is refused: reading a pickle can run code"):
        load_dataset("parquet-text", str(pickled))
    disguised = tmp_path / "frame.parquet"
    disguised.write_bytes(pickle.dumps({"text": ["a"]}, protocol=5))
    with pytest.raises(DataError, match="is refused: reading a pickle can run code"):
        load_dataset("parquet-text", str(disguised))
    folder = tmp_path / "mixed"
    folder.mkdir()
    pq.write_table(pa.table({"text": ["x" * 100]}), folder / "train.parquet")
    pq.write_table(pa.table({"text": ["y" * 100]}), folder / "extra.parquet")
    with pytest.raises(DataError, match="cannot tell which split extra.parquet"):
        load_dataset("parquet-text", str(folder))
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match="not a readable parquet file"):
        load_dataset("parquet-text", str(tmp_path / "broken.parquet"))


def _write_image_folder(root, classes=("cat", "dog"), per_class=6, side=32, seed=0):
    rng = np.random.default_rng(seed)
    for c in classes:
        (root / c).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(root / c / f"{i}.png")


def test_an_image_folder_with_classes_and_splits(tmp_path):
    _write_image_folder(tmp_path / "pets" / "train", per_class=10)
    _write_image_folder(tmp_path / "pets" / "test", per_class=2, side=48, seed=1)  # resized like uploads
    data = load_dataset("image-folder", str(tmp_path / "pets"))
    assert data.split["classes"] == ["cat", "dog"] and (data.split["n_train"], data.split["n_val"], data.split["n_test"]) == (18, 2, 4)
    assert data.test_inputs[:].shape == (4, 64, 48) and set(data.val_labels) <= {0, 1}
    flat = tmp_path / "flat"
    _write_image_folder(flat, classes=("a", "b", "c"), per_class=4)
    assert load_dataset("image-folder", str(flat)).split["n_test"] == 0


def test_a_corrupt_image_is_named_before_training(tmp_path):
    _write_image_folder(tmp_path / "pets")
    good = (tmp_path / "pets" / "cat" / "0.png").read_bytes()
    (tmp_path / "pets" / "cat" / "3.png").write_bytes(good[: len(good) // 2])
    with pytest.raises(DataError, match=r"3\.png: a corrupt or unreadable image"):
        load_dataset("image-folder", str(tmp_path / "pets"))
    with pytest.raises(DataError, match="no such folder"):
        load_dataset("image-folder", str(tmp_path / "absent"))


def test_a_parquet_image_run_trains_and_is_tested_once(tmp_path):
    from damcha import ModelConfig
    from damcha.runs.checkpoints import load_run
    from damcha.runs.train import TrainConfig, train

    folder = tmp_path / "shards"
    folder.mkdir()
    pq.write_table(_image_table(24, 0)[0], folder / "train.parquet")
    pq.write_table(_image_table(4, 1)[0], folder / "test.parquet")
    cfg = ModelConfig(n_layer=1, n_head=2, n_embd=16, attention_options={"generator_widths": (8,)})
    train(cfg, TrainConfig(dataset="parquet-images", data_path=str(folder), epochs=1, batch_size=8, completion_images=2),
          tmp_path / "run", progress=False)
    run = load_run(tmp_path / "run")
    assert run.test["epoch"] == 1 and run.test["test_mse"] > 0 and run.data["n_test"] == 4


def test_lazy_rows_index_like_the_tensor_they_stand_for():
    import torch

    from damcha.inputs.datasets.lazy_rows import LazyRows

    full = torch.arange(5 * 3 * 2, dtype=torch.float32).reshape(5, 3, 2)
    made = []
    rows = LazyRows(5, (3, 2), lambda idx: (made.append(len(idx)), full[torch.from_numpy(idx)])[1])
    assert rows.shape == full.shape and len(rows) == 5 and rows.ndim == 3 and not made  # nothing made to answer
    for index in (2, -1, slice(1, 4), slice(None, None, 2), torch.tensor([4, 0, 4]), (1, 0), (slice(0, 2), 1), (-2, 2, 1)):
        assert torch.equal(rows[index], full[index]), index
    assert np.array_equal(np.asarray(rows), full.numpy()) and max(made) == 5
