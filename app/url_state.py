"""What the page's address holds: the controls bound to it, guarded against any string a link can
carry, and typed inputs too long for an address kept by reference.

Every control whose value lives in the URL takes its key through `bound(key)`, which records it
(the URL fuzzing test reads the record), so a link can reopen the view and no value in a link can
break a page.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

import streamlit as st

from damcha.runs.checkpoints import write_text_atomic

URL = "query-params"  # widgets with this binding keep their value in the page's URL (their key is the name)
BOUND_KEYS = "_url_bound_keys"  # session entry: every key bound to the URL so far in this session
URL_TEXT_CHARS = 1_000  # typed inputs up to this length travel in the address itself
MAX_TYPED_CHARS = 1_000_000
STORE = Path(os.environ.get("DAMCHA_INPUT_STORE") or Path(tempfile.gettempdir()) / "damcha-typed-inputs")
STORE_ENTRIES = 256  # long typed inputs kept on disk for links and reloads; the oldest go first
REFERENCE_RE = re.compile(r"[0-9a-f]{16}")


def bound(key: str) -> dict:
    """Keyword arguments that bind a control to the URL under `key` (and record that it is)."""
    st.session_state.setdefault(BOUND_KEYS, set()).add(key)
    return {"key": key, "bind": URL}


def seed_from_url(key: str, options) -> None:
    """For a control the URL must always name (not bound: Streamlit drops a bound default from the
    address, and a link without the run would open another one): on its first run in a session,
    start it at the option the link names, if it names one. Call before creating the control."""
    st.session_state.setdefault(BOUND_KEYS, set()).add(key)
    linked = st.query_params.get(key)
    if key not in st.session_state and linked is not None:
        match = next((o for o in options if str(o) == linked), None)
        if match is not None:
            st.session_state[key] = match


def keep_in_url(key: str, value) -> None:
    """Write the value of a control seeded by `seed_from_url` into the URL, default or not."""
    if st.query_params.get(key) != str(value):
        st.query_params[key] = str(value)


def url_int(key: str, low: int, high: int) -> int | None:
    """The URL's value of an integer control when it is a plain integer in [low, high], else None.

    Any string survives: Streamlit's own URL reader turns '1e309' or 'inf' into an infinite float
    and fails converting it to an integer (an OverflowError no page can catch), so integer
    controls are not bound; their value is read here and written back by `url_number_input`."""
    raw = st.query_params.get(key)
    if raw is None or len(raw) > 12 or not re.fullmatch(r"-?[0-9]+", raw):
        return None
    value = int(raw)
    return value if low <= value <= high else None


def url_number_input(where, label: str, low: int, high: int, default: int, key: str, **kw) -> int:
    """An integer input in [low, high] whose value is in the URL (not when it is the default)."""
    kept_key = f"_{key}_kept"
    st.session_state.setdefault(BOUND_KEYS, set()).add(key)
    # As typed_text_area: a widget's own state belongs to its page, and a page without it (Home) drops it, so
    # the value is kept under a plain key, updated as it changes, and given to the widget on every page.
    if kept_key not in st.session_state:  # first run of this control in the session: what the link says
        linked = url_int(key, low, high)
        st.session_state[kept_key] = default if linked is None else linked
    kept = st.session_state[kept_key]
    if not isinstance(kept, int) or not low <= kept <= high:  # chosen for another input or run
        kept = min(max(int(kept), low), high) if isinstance(kept, int) else default
    st.session_state[key] = st.session_state[kept_key] = kept
    value = int(where.number_input(label, low, high, key=key,
                                   on_change=lambda: st.session_state.__setitem__(kept_key, st.session_state[key]), **kw))
    if value == default:
        _drop(key)
    else:
        keep_in_url(key, value)
    return value


# ----------------------------------------------------------------------------- long typed inputs

def typed_text_area(where, label: str, default: str, key: str, height: int = 100) -> str:
    """A text area whose content is in the URL while it is short; a longer one is stored on this
    server and the URL holds its 16-hex-digit reference (an address of a megabyte breaks reloads)."""
    ref_key, kept = f"{key}_ref", f"_{key}_kept"
    st.session_state.setdefault(BOUND_KEYS, set()).update({key, ref_key})
    # A widget's own state belongs to its page: the sidebar's page switch drops it (the text area came back
    # empty on the next page). The text is kept under a plain key, updated as it is typed, and given to the
    # widget on every page; the first time in a session it is what the link says.
    if kept not in st.session_state:
        st.session_state[kept] = st.session_state.get(key) or _initial_text(key, ref_key, default)
    st.session_state[key] = st.session_state[kept]
    value = where.text_area(label, key=key, height=height, max_chars=MAX_TYPED_CHARS,
                            on_change=lambda: st.session_state.__setitem__(kept, st.session_state[key]))
    if value == default:
        _drop(key, ref_key)
    elif len(value) <= URL_TEXT_CHARS:
        _drop(ref_key)
        if st.query_params.get(key) != value:
            st.query_params[key] = value
    else:
        ref = store_text(value)
        _drop(key)
        if st.query_params.get(ref_key) != ref:
            st.query_params[ref_key] = ref
        where.caption(f"{len(value):,} characters are too many for a link: the address holds a reference to this "
                      f"text, kept on this server (its last {STORE_ENTRIES} long inputs). A link to it works on this "
                      "server only while it is kept; to share the input, share the text itself.")
    return value


def _initial_text(key: str, ref_key: str, default: str) -> str:
    ref = st.query_params.get(ref_key)
    if ref is not None:
        text = load_text(ref)
        if text is not None:
            return text
        _drop(ref_key)
        st.warning("The link refers to a long typed input that this server no longer holds (or never did): "
                   "type or paste it again.")
    text = st.query_params.get(key)
    if text is None:
        return default
    if len(text) > MAX_TYPED_CHARS:
        _drop(key)
        return default
    return text


def _drop(*keys: str) -> None:
    for k in keys:
        if k in st.query_params:
            del st.query_params[k]


def store_text(text: str) -> str:
    """Keep a long typed input on disk; returns its reference (the first 16 hex digits of its SHA-256)."""
    ref = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    STORE.mkdir(parents=True, exist_ok=True)
    path = STORE / f"{ref}.txt"
    if not path.exists():
        write_text_atomic(path, text)
        kept = sorted(STORE.glob("*.txt"), key=lambda p: p.stat().st_mtime)
        for old in kept[:-STORE_ENTRIES]:
            old.unlink(missing_ok=True)
    return ref


def load_text(ref: str) -> str | None:
    """A stored typed input by reference, or None (unknown, evicted, or not a reference at all)."""
    if not REFERENCE_RE.fullmatch(ref):
        return None
    path = STORE / f"{ref}.txt"
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
