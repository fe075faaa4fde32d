"""Uploads -> model-ready input, or InputError with a message; never another exception."""

import numpy as np
import pytest
from PIL import Image

from damcha.inputs.uploads import InputError, digit_from_bytes, text_from_bytes
from tests.support.images import decompression_bomb_png, encode, handwritten_digit


def test_a_photographed_zero_becomes_a_ring_of_ink():
    d = digit_from_bytes(handwritten_digit("0"))
    assert d.levels.shape == (8, 8) and d.levels.max() == 16 and d.levels.min() == 0
    assert d.levels[3:5, 3:5].mean() < 4  # the hole of the zero
    assert d.levels[:, 1:3].mean() > d.levels[3:5, 3:5].mean() + 4  # its left stroke
    assert "dark ink on light background" in d.note


def test_a_one_is_a_vertical_stroke_and_inversion_is_detected():
    d = digit_from_bytes(handwritten_digit("1"))
    cols = d.levels.mean(axis=0)
    assert cols[3:5].mean() > 3 * cols[[0, 7]].mean() + 1
    inverted = Image.eval(Image.open(__import__("io").BytesIO(handwritten_digit("1"))), lambda v: 255 - v)
    d2 = digit_from_bytes(encode(inverted, "PNG"))
    assert "light ink on dark background" in d2.note
    assert np.abs(d2.levels - d.levels).mean() < 2


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "BMP", "WEBP"])
def test_every_accepted_format(fmt):
    assert digit_from_bytes(handwritten_digit("7", fmt=fmt)).levels.shape == (8, 8)


def test_modes_palette_16bit_cmyk_alpha_animated_and_tiny():
    base = Image.open(__import__("io").BytesIO(handwritten_digit("0"))).convert("L")
    i16 = Image.fromarray(np.asarray(base, dtype=np.uint16) * 257)
    rgba = base.convert("RGBA")
    rgba.putalpha(Image.eval(base, lambda v: 255 - v))  # ink opaque, paper transparent
    frames = [base, Image.new("L", base.size, 255)]
    cases = {
        "palette": encode(base.convert("P"), "PNG"),
        "16-bit": encode(i16, "PNG"),
        "cmyk": encode(base.convert("CMYK"), "JPEG"),
        "alpha": encode(rgba, "PNG"),
        "animated": encode(frames[0], "GIF", save_all=True, append_images=frames[1:]),
    }
    ref = digit_from_bytes(encode(base, "PNG")).levels
    for name, data in cases.items():
        levels = digit_from_bytes(data).levels
        assert np.abs(levels.astype(int) - ref).mean() < 2.5, name
    one = digit_from_bytes(encode(Image.new("L", (1, 1), 0), "PNG"))
    assert one.levels.shape == (8, 8)


@pytest.mark.parametrize("data, message", [
    (b"", "empty"),
    (b"this is not an image at all", "not a readable image"),
    (b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, "corrupt|not a readable"),
    (handwritten_digit("0", fmt="PNG")[:300], "corrupt or truncated"),
    (handwritten_digit("0", fmt="JPEG")[:400], "corrupt or truncated"),
    (encode(Image.new("L", (2000, 20), 255), "PNG"), "elongated"),
])
def test_bad_images_get_clear_messages(data, message):
    with pytest.raises(InputError, match=message):
        digit_from_bytes(data)


def test_decompression_bomb_is_refused_before_decoding():
    with pytest.raises(InputError, match="pixels"):
        digit_from_bytes(decompression_bomb_png())


def test_text_inputs():
    t = text_from_bytes("héllo world".encode(), 64)
    assert not t.cut and t.text == "héllo world" and len(t.tokens) == len("héllo world".encode())
    long = ("é" * 100).encode()
    t = text_from_bytes(long, 65)
    assert t.cut and t.total_bytes == 200 and len(t.tokens) == 64  # never half a character
    for data, message in [(b"", "empty"), (b"   \n", "empty"), (b"\x00\x01binary", "binary"),
                          (b"caf\xe9", "not valid UTF-8"), (bytes(range(1, 32)) * 10, "binary")]:
        with pytest.raises(InputError, match=message):
            text_from_bytes(data, 64)


def test_a_phone_photo_stored_sideways_is_read_upright():
    """Phones store the sensor's pixels and an EXIF orientation tag; the tag is applied first."""
    import io

    upright = Image.open(io.BytesIO(handwritten_digit("1", fmt="JPEG")))
    sideways = upright.transpose(Image.Transpose.ROTATE_90)  # what the sensor recorded
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90° clockwise to display
    tagged = encode(sideways, "JPEG", exif=exif.tobytes(), quality=95)
    assert np.abs(digit_from_bytes(tagged).levels - digit_from_bytes(encode(upright, "JPEG", quality=95)).levels).mean() < 1
    untagged = digit_from_bytes(encode(sideways, "JPEG", quality=95)).levels  # the same pixels without the tag:
    rows = untagged.mean(axis=1)  # a one lying on its side, a horizontal stroke
    assert rows[3:5].mean() > 3 * rows[[0, 7]].mean() + 1
