"""A small view of one input for a table cell: the picture the model sees as a PNG data URL, or the
first characters of a text, so a row of the data table shows what the input is, not only its index."""

from __future__ import annotations

import base64
import io

import numpy as np
from PIL import Image

from damcha.inputs.model_inputs import ModelInput
from damcha.views.figure_sets import ink_dark

THUMBNAIL_PX = 32  # a thumbnail's side, in pixels
SNIPPET_CHARS = 48


def _png_data_url(pixels: np.ndarray) -> str:
    """uint8 (h, w) grey or (h, w, 3) RGB pixels, scaled by whole pixels to THUMBNAIL_PX, as a data URL."""
    image = Image.fromarray(pixels)
    factor = max(1, THUMBNAIL_PX // max(image.size))
    image = image.resize((image.width * factor, image.height * factor), Image.Resampling.NEAREST)  # cells stay cells
    out = io.BytesIO()
    image.save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode("ascii")


def input_preview(inp: ModelInput) -> tuple[str, str]:
    """("image", data URL) for an input with a picture (digit levels with the ink dark, a colour image),
    ("text", its first characters, line breaks shown as ⏎) for a text, ("none", "") otherwise."""
    if inp.levels is not None:
        return "image", _png_data_url(ink_dark(inp.levels))
    if inp.image is not None:
        return "image", _png_data_url(np.asarray(inp.image, dtype=np.uint8))
    if inp.text is not None:
        text = inp.text.replace("\n", "⏎")
        return "text", text[:SNIPPET_CHARS] + ("…" if len(text) > SNIPPET_CHARS else "")
    return "none", ""
