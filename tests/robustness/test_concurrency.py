"""The cached model is shared by every browser session: concurrent work on it must equal serial work
and leave it unchanged."""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from damcha import inspect_input
from damcha.analysis.attribution import has_hooks, metric_contributions, token_attributions
from damcha.inputs.model_inputs import validation_input
from damcha.runs.checkpoints import load_model, load_run
from tests.support.models import opts

ROOT = Path(__file__).resolve().parents[2]


def _job(model, run, k):
    inp = validation_input(run, k % 40)
    mode = ("full", "diagonal", "off_diagonal")[k % 3]
    kind = k % 3
    if kind == 0:
        r = inspect_input(model, inp.tokens, inp.targets, options=opts(model, mode))
        return ("inspect", r.values("metric"), r.attention, r.loss)
    if kind == 1:
        c = metric_contributions(model, inp.tokens, inp.targets, {"metric_mode": mode})
        return ("contrib", c.values)
    a = token_attributions(model, inp.tokens, 0, "loss", inp.targets, n_steps=4)
    return ("ig", a.values, a.delta)


def _equal(a, b):
    assert a[0] == b[0]
    for x, y in zip(a[1:], b[1:]):
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y)
        else:
            assert x == y


def test_concurrent_inspections_attributions_equal_their_serial_twins():
    for name in ("digits-damcha-unshared", "text-damcha"):
        run = load_run(ROOT / "checkpoints" / name)
        model = load_model(run)
        state = {k: v.clone() for k, v in model.state_dict().items()}
        jobs = list(range(18))
        serial = [_job(model, run, k) for k in jobs]
        with ThreadPoolExecutor(max_workers=6) as pool:
            parallel = list(pool.map(lambda k, m=model, r=run: _job(m, r, k), jobs))
        for s, p in zip(serial, parallel):
            _equal(s, p)
        assert not model.training and not has_hooks(model)
        assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
        assert all(p.grad is None for p in model.parameters())


def test_several_app_sessions_at_once():
    from streamlit.testing.v1 import AppTest

    def session(run):
        at = AppTest.from_file(str(ROOT / "app" / "streamlit_app.py"), default_timeout=300)
        at.query_params["run"] = run
        at.switch_page("../pages/inspector.py")
        at.run()
        return [e.value for e in at.exception], len(at.get("plotly_chart"))

    runs = ["digits-damcha", "digits-mha", "text-damcha", "digits-damcha-bilinear"]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(session, runs))
    for run, (exceptions, charts) in zip(runs, results):
        assert not exceptions, (run, exceptions)
        assert charts >= 1, run  # the open tab's figure (and, for a picture, the input)
