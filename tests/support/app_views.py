"""Every view of a page with lazy tabs, for tests that read what a page shows.

A page's tabs are bound to the URL, so only the open tab builds its figures (a hidden tab builds
nothing); a test of what a page shows opens each tab in turn (and, in the Inspector's Structures tab,
each structure), one rerun each, and reads what every view rendered."""

import base64
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

from app.navigation import PAGES as NAVIGATION

APP = str(Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py")
# Pages that show the sidebar's run (the others, the evidence, read no run and have tests of their own).
RUN_PAGES = [e.path.stem for e in NAVIGATION if any(w in e.path.read_text() for w in ("selected_run(", "run_page(", '"selection"'))]

TAB_KEYS = ("tab", "grid")  # the URL keys of the pages' tab groups (the Inspector's, Training dynamics')
CHOICE_KEYS = ("shown", "drawn")  # controls inside a tab that choose one of several figures


def every_view(at) -> Iterator:
    """Yield the AppTest once per view: each tab of each bound tab group, each choice inside it."""
    groups = [k for k in TAB_KEYS if k in at.session_state]
    if not groups:
        yield at
        return
    for key in groups:
        for label in [t.label for t in at.tabs]:
            at.session_state[key] = label
            at.run()
            if key in at.session_state and at.session_state[key] != label:
                continue  # a tab of another group
            choices = [r for r in at.radio if r.key in CHOICE_KEYS]
            if not choices:
                yield at
                continue
            for option in choices[0].options:
                choices[0].set_value(option)
                at.run()
                yield at
                choices = [r for r in at.radio if r.key in CHOICE_KEYS]


def in_every_view(at, read: Callable) -> list:
    """What `read(at)` returns in every view, concatenated (duplicates of what every view shows kept)."""
    return [item for view in every_view(at) for item in read(view)]


def open_tab(at, label: str, key: str = "tab"):
    """Open one tab of a page (its controls exist only while it is open) and rerun."""
    at.session_state[key] = label
    return at.run()


def z_of(fig: dict, trace: int = 0, key: str = "z") -> np.ndarray:
    """A trace's z (or another array, `key`) as numbers (plotly's JSON may hold it base64-encoded)."""
    z = fig["data"][trace][key]
    if isinstance(z, dict):  # {"dtype", "bdata", "shape"}
        flat = np.frombuffer(base64.b64decode(z["bdata"]), dtype=np.dtype(z["dtype"])).astype(float)
        return flat.reshape(tuple(int(n) for n in str(z["shape"]).split(","))) if z.get("shape") else flat
    return np.asarray(z, dtype=float)


def page_app(root: Path, run: str, page: str, compare_with: list[str] | None = None, **params) -> AppTest:
    """A page of the app, run once on `run` of the checkpoint folder `root` (query parameters as given)."""
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["checkpoint_root"] = str(root)
    at.session_state["table_rows"] = 8  # the data table of a few validation inputs: every variant, in seconds
    at.session_state["compare_runs"] = compare_with or [run]  # all runs at once in a test of their own
    at.query_params["run"] = run
    for k, v in params.items():
        at.query_params[k] = str(v)
    at.switch_page(f"../pages/{page}.py")
    return at.run()
