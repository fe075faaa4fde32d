"""Images made in the tests: a photographed-looking handwritten digit, and hostile files."""

import io

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def handwritten_digit(kind: str = "0", size: int = 240, fmt: str = "PNG", seed: int = 0) -> bytes:
    """Dark pen strokes on slightly uneven light paper, blurred and noisy like a phone photo."""
    rng = np.random.default_rng(seed)
    img = Image.new("L", (size, int(size * 1.2)), 225)
    d = ImageDraw.Draw(img)
    w = max(3, size // 14)
    cx, cy = size // 2, int(size * 0.6)
    if kind == "0":
        d.ellipse([cx - size // 5, cy - size // 3, cx + size // 5, cy + size // 3], outline=30, width=w)
    elif kind == "1":
        d.line([cx, cy - size // 3, cx, cy + size // 3], fill=30, width=w)
    elif kind == "7":
        d.line([cx - size // 5, cy - size // 3, cx + size // 5, cy - size // 3], fill=30, width=w)
        d.line([cx + size // 5, cy - size // 3, cx - size // 12, cy + size // 3], fill=30, width=w)
    img = img.filter(ImageFilter.GaussianBlur(1.5))
    arr = np.asarray(img, dtype=np.float64) + rng.normal(0, 6, (img.height, img.width))
    arr += np.linspace(-10, 10, img.width)[None, :]  # uneven lighting
    img = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "L").convert("RGB")
    return encode(img, fmt)


def encode(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def decompression_bomb_png() -> bytes:
    """A tiny PNG whose header claims 30000 x 30000 pixels."""
    return encode(Image.new("1", (30000, 30000), 0), "PNG", optimize=True)
