"""The folder DAMCHA Lab keeps derived files in: $DAMCHA_CACHE, else the user's cache folder as
platformdirs knows it (~/.cache/damcha-lab on Linux). The disk cache of evaluations and the data
members extracted from zips live in it."""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_cache_dir


def cache_folder() -> Path:
    return Path(os.environ.get("DAMCHA_CACHE") or user_cache_dir("damcha-lab", appauthor=False))
