"""Colour images: the offline data set, uploads into patch models, completions (every page on a patch run:
tests/app/test_image_pages.py)."""

import io

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from damcha import inspect_input
from damcha.inputs.datasets.sample_images import SAMPLE_IMAGE_TRAIN_FRACTION, sample_image_crops
from damcha.inputs.modalities.image_patches import cifar_patches, patches_to_image
from damcha.inputs.model_inputs import input_from_photo, validation_input
from damcha.inputs.uploads import InputError, photo_from_bytes
from damcha.runs.checkpoints import load_model
from damcha.runs.evaluation import complete_patches
from tests.support.images import decompression_bomb_png, encode, handwritten_digit
from tests.support.training import tiny_patch_run


@pytest.fixture(scope="module")
def patch_run(tmp_path_factory):
    return tiny_patch_run(tmp_path_factory.mktemp("runs"))


def test_crops_are_deterministic_and_training_never_sees_a_validation_pixel():
    a, b = sample_image_crops(0), sample_image_crops(0)
    assert np.array_equal(a["train"], b["train"]) and np.array_equal(a["val"], b["val"])
    assert not np.array_equal(sample_image_crops(1)["val"], a["val"])
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    cut = int(photos[0].shape[1] * SAMPLE_IMAGE_TRAIN_FRACTION)
    assert all(x + 32 <= cut for _, _, x, _ in a["origins"]["train"])
    assert all(x >= cut for _, _, x, _ in a["origins"]["val"])
    for crop, (k, y, x, flipped) in zip(a["val"][:20], a["origins"]["val"][:20]):
        region = photos[k][y:y + 32, x:x + 32]
        assert np.array_equal(crop, region[:, ::-1] if flipped else region)
    assert [r["val_columns"][0] for r in a["regions"]] == [cut, cut]


def test_patch_round_trip_is_exact():
    img = sample_image_crops(0)["val"][:3]
    back = np.stack([patches_to_image(p) for p in cifar_patches(img)])
    assert np.array_equal(np.rint(back * 255).astype(np.uint8), img)


def test_an_uploaded_photo_is_read_upright_centre_cropped_and_patched(patch_run):
    photo = Image.fromarray(sample_image_crops(0)["val"][0]).resize((90, 60))
    raw = encode(photo, "PNG")
    inp = input_from_photo(patch_run, raw, "x.png")
    expected = np.asarray(ImageOps.fit(photo.convert("RGB"), (32, 32), Image.Resampling.LANCZOS), dtype=np.uint8)
    assert np.array_equal(inp.image, expected)
    patches = cifar_patches(expected[None])[0]
    np.testing.assert_array_equal(inp.targets, patches)
    np.testing.assert_array_equal(inp.tokens[1:], patches[:-1])
    assert not inp.tokens[0].any()  # the zero start vector
    model = load_model(patch_run)
    direct = inspect_input(model, np.concatenate([np.zeros((1, 48)), patches[:-1]]), patches)
    via_upload = inspect_input(model, inp.tokens, inp.targets)
    np.testing.assert_allclose(via_upload.logits, direct.logits, atol=1e-6)
    assert via_upload.token_labels[1] == "patch r1c1" and via_upload.modality.name == "image_patches"


def test_completion_uses_only_the_top_half(patch_run):
    model = load_model(patch_run)
    inp = validation_input(patch_run, 0)
    x = torch.as_tensor(inp.tokens, dtype=torch.float32)[None]
    changed = x.clone()
    changed[:, 34:] = torch.rand_like(changed[:, 34:])  # the bottom half of the input (patches 33..62)
    a, b = complete_patches(model, x), complete_patches(model, changed)
    assert torch.equal(a, b)
    assert torch.equal(a[0, :32], torch.as_tensor(inp.targets[:32]))


@pytest.mark.parametrize("case", ["cmyk", "sixteen_bit", "palette", "alpha", "animated", "tiny", "panorama",
                                  "bomb", "truncated", "empty", "grey"])
def test_hostile_colour_images_get_a_clear_message_or_a_clean_image(case):
    rgb = Image.fromarray(sample_image_crops(0)["val"][1]).resize((64, 48))
    data = {
        "cmyk": lambda: encode(rgb.convert("CMYK"), "JPEG"),
        "sixteen_bit": lambda: encode(Image.fromarray((np.arange(64 * 48).reshape(48, 64) * 20).astype(np.uint16)), "PNG"),
        "palette": lambda: encode(rgb.convert("P"), "GIF"),
        "alpha": lambda: encode(rgb.convert("RGBA"), "PNG"),
        "animated": lambda: _animated(rgb),
        "tiny": lambda: encode(rgb.resize((1, 1)), "PNG"),
        "panorama": lambda: encode(rgb.resize((2000, 40)), "PNG"),
        "bomb": decompression_bomb_png,
        "truncated": lambda: encode(rgb, "JPEG")[:300],
        "empty": lambda: b"",
        "grey": lambda: handwritten_digit("7"),
    }[case]()
    try:
        photo = photo_from_bytes(data)
    except InputError as e:
        assert str(e) and case in ("panorama", "bomb", "truncated", "empty")
        return
    assert case not in ("panorama", "bomb", "empty")
    assert photo.image.shape == (32, 32, 3) and photo.image.dtype == np.uint8


def _animated(img):
    buf = io.BytesIO()
    img.save(buf, format="GIF", save_all=True, append_images=[img.rotate(90)], duration=100)
    return buf.getvalue()
