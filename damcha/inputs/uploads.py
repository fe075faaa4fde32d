"""User inputs -> model-ready tokens, with a clear InputError for anything that is not usable.

Images become 8x8 grey-level digits the way scikit-learn's digits were made (a 32x32
bitmap counted in 4x4 blocks, 0..16 ink); texts become UTF-8 bytes cut to the context.
"""

from __future__ import annotations

import io
import struct
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from damcha.inputs.modalities.digit_image import DIGIT_LEVELS, digit_levels_to_tokens, digit_sequence

# The app's uploader takes server.maxUploadSize = 5 MB, counted as Streamlit counts it (decimal megabytes): the
# same bound here, so a file the uploader passes is never refused again by a different count.
MAX_UPLOAD_BYTES = 5_000_000
MAX_IMAGE_PIXELS = 40_000_000  # decompression-bomb guard: refused before decoding
MAX_ASPECT = 20.0
IMAGE_FORMATS = ("PNG", "JPEG", "GIF", "BMP", "WEBP")


class InputError(ValueError):
    """The input cannot be used; the message says what was wrong and what is accepted."""


@dataclass(frozen=True)
class DigitInput:
    levels: np.ndarray  # (8, 8) ints 0..16, ink high, as the model sees it
    note: str  # what preprocessing did


@dataclass(frozen=True)
class TextInput:
    tokens: np.ndarray  # (T,) byte tokens the model reads
    text: str  # the characters those bytes decode to
    total_bytes: int  # length of the original text in bytes
    cut: bool  # True when the text was longer than the context and was cut


def decode_image(data: bytes) -> Image.Image:
    """Bytes -> a single-frame greyscale PIL image, or InputError."""
    return _to_grey(open_image(data))


def open_image(data: bytes) -> Image.Image:
    """Bytes -> a single-frame PIL image, upright (EXIF orientation applied), in its own mode; or InputError."""
    if not data:
        raise InputError("the file is empty; upload a PNG, JPEG, GIF, BMP or WebP image")
    if len(data) > MAX_UPLOAD_BYTES:
        raise InputError(f"the file is {len(data) / 1e6:.1f} MB; images up to {MAX_UPLOAD_BYTES / 1e6:g} MB are accepted")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img: Image.Image = Image.open(io.BytesIO(data), formats=IMAGE_FORMATS)
            w, h = img.size
            if w < 1 or h < 1:
                raise InputError("the image has no pixels")
            if w * h > MAX_IMAGE_PIXELS:
                raise InputError(f"the image is {w}x{h} pixels; at most {MAX_IMAGE_PIXELS:,} pixels are accepted")
            if max(w, h) / min(w, h) > MAX_ASPECT:
                raise InputError(f"the image is {w}x{h}: too elongated (aspect ratio above {MAX_ASPECT:g})")
            img.seek(0)  # animated: the first frame
            img.load()
            # A phone stores its photo sideways with an EXIF orientation tag: turn it upright first.
            img = ImageOps.exif_transpose(img)
    except InputError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise InputError(f"the image declares too many pixels to decode safely (a decompression bomb?); "
                         f"at most {MAX_IMAGE_PIXELS:,} pixels are accepted") from None
    except UnidentifiedImageError as e:
        raise InputError(f"not a readable image ({type(e).__name__}); upload a PNG, JPEG, GIF, BMP or WebP image") from None
    except (OSError, ValueError, SyntaxError, EOFError, MemoryError, struct.error) as e:
        raise InputError(f"the image is corrupt or truncated ({e}); upload a complete PNG, JPEG, GIF, BMP or WebP image") from None
    return img


def _to_rgb(img: Image.Image) -> Image.Image:
    """Any mode (palette, 16-bit, CMYK, alpha, greyscale) -> 8-bit 'RGB'; transparency becomes white."""
    if img.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        return _to_grey(img).convert("RGB")
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")
    return img.convert("RGB")


@dataclass(frozen=True)
class PhotoInput:
    image: np.ndarray  # (32, 32, 3) uint8, what the model sees
    note: str


def photo_from_bytes(data: bytes, side: int = 32) -> PhotoInput:
    """A colour photo -> a side x side RGB image the way CIFAR images are: upright, centre-cropped to a
    square, resized with a Lanczos filter."""
    img = _to_rgb(open_image(data))
    w, h = img.size
    small = ImageOps.fit(img, (side, side), Image.Resampling.LANCZOS, centering=(0.5, 0.5))
    note = (f"{w}x{h} {'' if w == h else 'centre-cropped to a square, '}resized to {side}x{side} "
            f"(Lanczos), RGB")
    return PhotoInput(np.asarray(small, dtype=np.uint8), note)


def _to_grey(img: Image.Image) -> Image.Image:
    """Any mode (palette, 16-bit, CMYK, alpha) -> 8-bit 'L'; transparency becomes white paper."""
    if img.mode in ("I;16", "I;16B", "I;16L", "I"):
        arr = np.asarray(img, dtype=np.float64)
        lo, hi = float(arr.min()), float(arr.max())
        arr = (arr - lo) / (hi - lo) * 255 if hi > lo else np.zeros_like(arr)
        return Image.fromarray(arr.astype(np.uint8), "L")
    if img.mode == "F":
        arr = np.nan_to_num(np.asarray(img, dtype=np.float64))
        lo, hi = float(arr.min()), float(arr.max())
        arr = (arr - lo) / (hi - lo) * 255 if hi > lo else np.zeros_like(arr)
        return Image.fromarray(arr.astype(np.uint8), "L")
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        paper = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(paper, rgba).convert("L")
    return img.convert("L")


def image_to_digit(img: Image.Image) -> DigitInput:
    """A greyscale picture of one digit -> (8, 8) levels like scikit-learn's digits (ink = 16)."""
    grey = np.asarray(img, dtype=np.float64) / 255.0  # (h, w) 1 = white
    border = np.concatenate([grey[0], grey[-1], grey[:, 0], grey[:, -1]])
    inverted = np.median(border) < 0.5  # light ink on a dark background
    ink = grey if inverted else 1.0 - grey  # (h, w) 1 = ink
    paper = float(np.median(border if inverted else 1.0 - border))  # ink value of the background
    ink = np.clip((ink - paper) / max(1e-6, 1.0 - paper), 0.0, 1.0)  # (h, w) background -> 0
    notes = ["light ink on dark background" if inverted else "dark ink on light background"]
    mask = ink > 0.25
    if mask.any():
        ys, xs = np.where(mask)
        ink = ink[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
        notes.append("cropped to the ink")
    else:
        notes.append("no ink found: the image is blank")
    h, w = ink.shape
    side = int(max(h, w) * 1.25) + 1  # square with a margin, like the digits' 32x32 frames
    canvas = np.zeros((side, side))
    y0, x0 = (side - h) // 2, (side - w) // 2
    canvas[y0:y0 + h, x0:x0 + w] = ink
    big = Image.fromarray((canvas * 255).astype(np.uint8), "L").resize((32, 32), Image.Resampling.BOX)
    bitmap = np.asarray(big, dtype=np.float64) / 255.0  # (32, 32)
    levels = bitmap.reshape(8, 4, 8, 4).mean(axis=(1, 3))  # (8, 8) ink fraction of each 4x4 block
    if levels.max() > 0:  # a thin pen stroke covers less of a block than the digits' thick ones: stretch
        levels = levels / levels.max()
        notes.append("contrast stretched to 0..16")
    levels = np.rint(levels * (DIGIT_LEVELS - 1)).astype(np.int64)  # (8, 8) levels 0..16
    return DigitInput(levels, "; ".join(notes) + "; 32x32 bitmap counted in 4x4 blocks -> 8x8 levels 0..16")


def digit_from_bytes(data: bytes) -> DigitInput:
    return image_to_digit(decode_image(data))


def digit_tokens(levels: np.ndarray, classification: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """(8, 8) levels -> (model inputs, next-token targets or None for a classifier)."""
    pixels = digit_levels_to_tokens(levels)  # (64,)
    if classification:
        return pixels, None
    seq = digit_sequence(pixels)  # (65,)
    return seq[:-1], seq[1:]


def text_from_bytes(data: bytes, block_size: int) -> TextInput:
    """UTF-8 text -> the byte tokens the model reads (the first block_size bytes), or InputError."""
    if len(data) > MAX_UPLOAD_BYTES:
        raise InputError(f"the text is {len(data) / 1e6:.1f} MB; texts up to {MAX_UPLOAD_BYTES / 1e6:g} MB are accepted")
    if not data.strip():
        raise InputError("the text is empty; type or upload some UTF-8 text")
    if b"\x00" in data[:65536]:
        raise InputError("this looks like a binary file (it contains NUL bytes); upload plain UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"the text is not valid UTF-8 (byte {e.start}); save it as UTF-8 and upload again") from None
    control = sum(1 for ch in text[:65536] if ord(ch) < 32 and ch not in "\n\r\t\f")
    if control > 0.05 * min(len(text), 65536):
        raise InputError("this looks like a binary file (many control characters); upload plain UTF-8 text")
    cut = len(data) > block_size
    kept = data[:block_size]
    if cut:  # do not split a multi-byte character
        kept = kept.decode("utf-8", errors="ignore").encode("utf-8")
        if not kept:
            raise InputError(f"the first character does not fit the model's context of {block_size} bytes")
    tokens = np.frombuffer(kept, dtype=np.uint8).astype(np.int64)
    return TextInput(tokens, kept.decode("utf-8"), len(data), cut)
