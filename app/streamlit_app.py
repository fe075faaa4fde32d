"""Entry point of `streamlit run app`: the shared sidebar run picker, then the page router."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the app also runs from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))

import pandas  # noqa: E402, F401 — imported whole before any figure: plotly peeks at a half-imported pandas of another session's thread
import streamlit as st  # noqa: E402

from app.export_widgets import export_all_widget, export_settings_widget  # noqa: E402
from app.navigation import PAGES  # noqa: E402
from app.run_picker import listed_root, run_picker  # noqa: E402
from app.sharing import is_local_server, redacted  # noqa: E402
from damcha.runs.checkpoints import CheckpointError  # noqa: E402

st.set_page_config(page_title="DAMCHA Lab", layout="wide")
pages = [st.Page(entry.path, title=entry.title, icon=entry.icon, default=not entry.url_path,
                 **({"url_path": entry.url_path} if entry.url_path else {})) for entry in PAGES]
nav = st.navigation(pages)
st.session_state["selection"] = run_picker()
export_settings_widget()
st.session_state["export_registry"] = {}  # filled by the page's figures, for "Export all"
try:
    nav.run()
except CheckpointError as e:  # a snapshot that went bad after the run was listed: say so, keep the rest usable
    st.error(f"{redacted(str(e), listed_root())}. Pick another epoch or run in the sidebar.")
except Exception as e:
    if is_local_server():  # the user's own server: the whole traceback, where Streamlit shows it
        raise
    # A shared server: visitors get the kind of failure only (an exception's text may hold any of
    # the server's paths); the traceback goes to the server's log.
    logging.getLogger("damcha.app").exception("page failed")
    st.error(f"This view failed ({type(e).__name__}). The server's log has the details.")
export_all_widget()
