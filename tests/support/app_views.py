"""Every view of a page with lazy tabs, for tests that read what a page shows.

A page's tabs are bound to the URL, so only the open tab builds its figures (a hidden tab builds
nothing); a test of what a page shows opens each tab in turn (and, in the Inspector's Structures tab,
each structure), one rerun each, and reads what every view rendered."""

import base64
from collections.abc import Callable, Iterator

import numpy as np

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
