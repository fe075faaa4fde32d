"""The token view: its data equal the record for every mechanism, and the exported file works
offline in Chromium (opened from disk with the network off, every request refused and counted)."""

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from damcha.analysis.inspection import inspect_input
from damcha.inputs.model_inputs import validation_input
from damcha.runs.checkpoints import load_model, load_run
from damcha.views.token_view import per_query_head_norms, token_view_data, token_view_html
from tests.support.browser import CHROMIUM_ARGS, require_chromium
from tests.support.models import ALL_VARIANTS, tiny_model

ROOT = Path(__file__).resolve().parents[2]


def shipped_record(name: str):
    run = load_run(ROOT / "checkpoints" / name)
    inp = validation_input(run, 0)
    return inspect_input(load_model(run), inp.tokens, inp.targets)


@pytest.mark.parametrize("variant", ALL_VARIANTS)
def test_the_views_data_are_the_records_attention_and_norms(variant):
    model = tiny_model(variant, dtype=torch.float32)
    record = inspect_input(model, torch.randint(0, 11, (16,)))  # plain token ids, as a converted run reads
    data = token_view_data(record)
    A = np.frombuffer(base64.b64decode(data["attention"]), dtype="<i2").reshape(record.attention.shape) * data["scale"]
    np.testing.assert_allclose(A, record.attention, atol=data["scale"])  # signed weights (THA, Diff) kept too
    assert data["signed"] == bool((record.attention < 0).any())
    assert data["labels"] == list(record.token_labels) and data["heads"] == record.n_head
    for name, norms in per_query_head_norms(record).items():
        s = next(s for s in record.structures if name == f"‖{s.title}‖ per head")
        first = np.sqrt((s.at(layer=0, position=3) ** 2).sum(axis=(-1, -2)))
        np.testing.assert_allclose(norms[0, 3], first, rtol=1e-6)
    html = token_view_html(record)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)  # loads nothing from anywhere


def test_a_text_in_the_data_cannot_close_the_script(tmp_path):
    record = shipped_record("text-mha")
    import dataclasses

    hostile = dataclasses.replace(record, token_labels=("</script><b>x",) + record.token_labels[1:])
    html = token_view_html(hostile, "<i>title</i>")
    assert html.count("</script>") == 1 and "<i>title</i>" not in html
    assert json.loads(html.split("const D = ", 1)[1].split(";\n", 1)[0])["labels"][0] == "</script><b>x"


@pytest.mark.slow  # Chromium: with the browser tests, not the inner loop
def test_the_exported_file_works_offline_in_chromium(tmp_path):
    from playwright.sync_api import sync_playwright

    exe = require_chromium()
    record = shipped_record("text-damcha")
    path = tmp_path / "tokens.html"
    path.write_text(token_view_html(record, "text-damcha offline"), encoding="utf-8")
    requests, errors = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        context = browser.new_context(offline=True)
        context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                      else (requests.append(route.request.url), route.abort()))
        pg = context.new_page()
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.goto(path.as_uri())
        q = 40
        pg.locator(".tok").nth(q).hover()
        weights = np.array([[float(b.get_attribute("data-w")) for b in pg.locator(".tok").nth(k).locator(".bars i").all()]
                            for k in range(len(record.tokens))])  # (T, H): key k, head h
        np.testing.assert_allclose(weights.T, record.attention_map(0)[:, q, :], atol=1e-3)
        assert (weights[q + 1:] == 0).all()  # causal: nothing after the query
        info = pg.locator("#info").inner_text()
        assert f"(position {q}) attends to" in info and "‖Per-head metrics m_i‖ per head" in info
        pg.locator(".tok").nth(q).click()  # kept: pointing elsewhere no longer moves it
        pg.locator(".tok").nth(5).hover()
        assert f"(position {q})" in pg.locator("#info").inner_text()
        pg.select_option("#layer", "1")  # layer 2's maps
        second = [float(b.get_attribute("data-w")) for b in pg.locator(".tok").nth(q).locator(".bars i").all()]
        np.testing.assert_allclose(second, record.attention_map(1)[:, q, q], atol=1e-3)
        pg.click("#none")
        assert all(b.get_attribute("data-w") == "0.000" for b in pg.locator(".tok").nth(q).locator(".bars i").all())
        pg.screenshot(path=str(tmp_path / "tokens.png"))
        browser.close()
    assert not requests, requests
    assert not errors, errors
