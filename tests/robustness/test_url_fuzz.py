"""Any string in a link: every control a page keeps in the URL survives hostile values on every page."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.navigation import PAGES as NAVIGATION
from app.url_state import BOUND_KEYS, URL_TEXT_CHARS
from damcha.runs.checkpoints import list_runs

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app" / "streamlit_app.py")
PAGES = [entry.path.stem for entry in NAVIGATION]  # the app's menu
# One run per data set: the one whose mechanism offers the most per-call controls (the most bound keys).
RUNS = {r.dataset: r.name for r in sorted(list_runs(ROOT / "checkpoints")[0],
                                          key=lambda r: len(r.model_config.mechanism.option_choices))}
HOSTILE = ["inf", "nan", "1e309", "-1e309", "-1", "9" * 30, "x" * 20_000, "<script>alert(1)</script>**[x](javascript:1)**"]


def page_app(page: str, run: str, params: dict[str, str]) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["run"] = run
    for k, v in params.items():
        at.query_params[k] = v
    at.switch_page(f"../pages/{page}.py")
    return at.run()


def bound_keys(page: str, run: str) -> set[str]:
    at = page_app(page, run, {})
    assert not at.exception, [e.value for e in at.exception]
    return set(at.session_state[BOUND_KEYS]) if BOUND_KEYS in at.session_state else set()


CASES = [(page, "digits") for page in PAGES] + [("inspector", "text")]


@pytest.mark.parametrize(("page", "dataset"), CASES)
def test_every_bound_key_survives_hostile_values(page, dataset):
    run = RUNS[dataset]
    keys = bound_keys(page, run)
    assert {"run", "epoch", "dataset"} <= keys  # the sidebar's, on every page
    for value in HOSTILE:
        params = {k: value for k in keys if k != "run"}
        at = page_app(page, run, params)
        assert not at.exception, (page, value[:20], [e.value for e in at.exception])
        assert at.selectbox(key="run").value == run  # the rest of the link still holds
        assert all(len(v) <= URL_TEXT_CHARS + 100 for v in at.query_params.values()), "a long value stays in the URL"


def test_bound_keys_cover_the_input_picker_and_the_page_controls():
    keys = bound_keys("inspector", RUNS["digits"])
    assert {"sample", "source", "mode", "tab"} <= keys, keys
    assert {"text", "text_ref"} <= bound_keys("inspector", RUNS["text"])


def test_a_linked_sample_is_read_and_an_overflowing_one_ignored():
    at = page_app("inspector", RUNS["digits"], {"sample": "5"})
    assert at.number_input(key="sample").value == 5
    at = page_app("inspector", RUNS["digits"], {"sample": "1e309"})
    assert not at.exception and at.number_input(key="sample").value == 0


def test_long_typed_text_stays_out_of_the_address_and_survives_a_reload(tmp_path, monkeypatch):
    import app.url_state as url_state

    monkeypatch.setattr(url_state, "STORE", tmp_path / "store")
    text = "A long paste. " * 70_000  # about 1 MB
    at = page_app("inspector", RUNS["text"], {})
    at.text_area(key="text").set_value(text).run()
    assert not at.exception
    assert "text" not in at.query_params and len(at.query_params["text_ref"]) == 16
    assert any("too many for a link" in c.value for c in at.caption)
    reloaded = page_app("inspector", RUNS["text"], dict(at.query_params))  # a fresh session on the same link
    assert reloaded.text_area(key="text").value == text
    short = page_app("inspector", RUNS["text"], {"text": "Short enough to share."})
    assert short.text_area(key="text").value == "Short enough to share."
    gone = page_app("inspector", RUNS["text"], {"text_ref": "0123456789abcdef"})
    assert not gone.exception and any("no longer holds" in w.value for w in gone.warning)
