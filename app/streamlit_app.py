"""Entry point of `streamlit run app`: routes to the views in the top-level pages/ folder."""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the app also runs from a plain checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))

st.set_page_config(page_title="DAMCHA Lab", layout="wide")
home = st.Page(ROOT / "pages" / "home.py", title="Home", default=True)
st.navigation([home]).run()
