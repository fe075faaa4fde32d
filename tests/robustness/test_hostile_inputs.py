"""Fuzzing the upload decoders: every input is either model-ready or an InputError with a message;
never another exception, and within bounded time and memory."""

import resource
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from damcha.inputs.uploads import InputError, digit_from_bytes, text_from_bytes
from tests.support.images import decompression_bomb_png, encode, handwritten_digit

VALID = {fmt: handwritten_digit("7", size=120, fmt=fmt) for fmt in ("PNG", "JPEG", "GIF", "BMP", "WEBP")}
COUNTS = {"random": 0, "truncated": 0, "garbage_body": 0, "shapes": 0, "modes": 0, "text": 0}


def _decode_ok_or_input_error(data: bytes) -> None:
    try:
        d = digit_from_bytes(data)
        assert d.levels.shape == (8, 8) and d.levels.dtype.kind == "i"
        assert 0 <= d.levels.min() and d.levels.max() <= 16
    except InputError as e:
        assert str(e)


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=4096))
def test_random_bytes(data):
    COUNTS["random"] += 1
    _decode_ok_or_input_error(data)


@FUZZ
@given(st.sampled_from(sorted(VALID)), st.floats(0, 1))
def test_truncated_valid_files(fmt, frac):
    COUNTS["truncated"] += 1
    raw = VALID[fmt]
    _decode_ok_or_input_error(raw[: int(len(raw) * frac)])


@FUZZ
@given(st.sampled_from(sorted(VALID)), st.integers(8, 64), st.binary(min_size=1, max_size=2048))
def test_valid_headers_with_garbage_bodies(fmt, keep, garbage):
    COUNTS["garbage_body"] += 1
    _decode_ok_or_input_error(VALID[fmt][:keep] + garbage)


@FUZZ
@given(st.integers(1, 3000), st.integers(1, 3000), st.sampled_from(["PNG", "GIF", "BMP"]))
def test_extreme_sizes_and_aspect_ratios(w, h, fmt):
    COUNTS["shapes"] += 1
    if w * h > 3_000_000:
        return
    img = Image.new("L", (w, h), 255)
    img.paste(0, (w // 3, h // 3, max(w // 3 + 1, 2 * w // 3), max(h // 3 + 1, 2 * h // 3)))
    _decode_ok_or_input_error(encode(img, fmt))


@FUZZ
@given(st.sampled_from(["1", "L", "P", "RGB", "RGBA", "LA", "CMYK", "I;16", "I", "F", "PA"]),
       st.sampled_from(["PNG", "GIF", "BMP", "JPEG", "WEBP", "TIFF"]), st.integers(0, 2**16))
def test_colour_modes(mode, fmt, seed):
    COUNTS["modes"] += 1
    rng = np.random.default_rng(seed)
    base = Image.fromarray(rng.integers(0, 256, (40, 30), dtype=np.uint8), "L")
    try:
        img = base.convert(mode) if mode not in ("I;16",) else Image.fromarray(np.asarray(base, dtype=np.uint16) * 257)
        data = encode(img, fmt)
    except (OSError, ValueError, KeyError):
        return  # Pillow cannot write this mode in this format: nothing to upload
    _decode_ok_or_input_error(data)


def test_animated_alpha_and_bomb():
    frames = [Image.new("RGBA", (50, 50), (0, 0, 0, a)) for a in (0, 128, 255)]
    _decode_ok_or_input_error(encode(frames[0], "GIF", save_all=True, append_images=frames[1:]))
    _decode_ok_or_input_error(encode(frames[0], "PNG", save_all=True, append_images=frames[1:]))  # APNG
    bomb = decompression_bomb_png()  # made before measuring: building it takes memory of its own
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        digit_from_bytes(bomb)
        raise AssertionError("a decompression bomb was decoded")
    except InputError as e:
        assert "pixels" in str(e)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 200  # refused before the 900-megapixel body was decoded


@FUZZ
@given(st.binary(max_size=3000) | st.text(max_size=3000).map(lambda s: s.encode("utf-8", "surrogatepass")),
       st.integers(1, 512))
def test_text_decoder(data, block):
    COUNTS["text"] += 1
    try:
        t = text_from_bytes(data, block)
        assert 0 < len(t.tokens) <= block and t.tokens.min() >= 0 and t.tokens.max() < 256
        assert bytes(t.tokens.astype(np.uint8)).decode("utf-8") == t.text
    except InputError as e:
        assert str(e)


def test_huge_text_is_refused_with_a_limit():
    try:
        text_from_bytes(b"a" * (6 * 2**20), 128)
        raise AssertionError("a 6 MB text was accepted")
    except InputError as e:
        assert "MB" in str(e)


def test_the_librarys_upload_limit_is_the_uploaders_as_streamlit_counts_it():
    import tomllib

    from damcha.inputs.uploads import MAX_UPLOAD_BYTES

    config = tomllib.loads((Path(__file__).resolve().parents[2] / "app" / ".streamlit" / "config.toml").read_text())
    assert MAX_UPLOAD_BYTES == config["server"]["maxUploadSize"] * 1_000_000  # Streamlit's megabytes are decimal
    text_from_bytes(b"a" * MAX_UPLOAD_BYTES, 128)  # what the uploader passes is read
    try:
        text_from_bytes(b"a" * (MAX_UPLOAD_BYTES + 1), 128)
        raise AssertionError("a text over the limit was accepted")
    except InputError as e:
        assert "texts up to 5 MB are accepted" in str(e)
