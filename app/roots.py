"""The checkpoint folders: the shipped one, the default, the one this session opened."""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent.parent


SHIPPED_ROOT = ROOT / "checkpoints"


def default_root() -> Path:
    """$DAMCHA_CHECKPOINTS, else the shipped checkpoints/."""
    return Path(os.environ.get("DAMCHA_CHECKPOINTS") or SHIPPED_ROOT)


def checkpoint_root() -> Path:
    """The run folder: the in-app setting, else the default one."""
    return Path(st.session_state.get("checkpoint_root", default_root()))
