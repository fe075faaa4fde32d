"""AppTest (streamlit.testing) of every page on the shipped runs: uploads, controls, bad inputs."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from damcha.runs.checkpoints import list_runs
from tests.support.app_views import in_every_view, open_tab, z_of
from tests.support.images import handwritten_digit

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app" / "streamlit_app.py")
SHIPPED = ROOT / "checkpoints"
RUNS = [r.name for r in list_runs(SHIPPED)[0]] if SHIPPED.is_dir() else []


def new_app(run: str | None = None, page: str | None = None, root: Path | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    if run:
        at.query_params["run"] = run
    if root:
        at.session_state["checkpoint_root"] = str(root)
    if page:
        at.switch_page(f"../pages/{page}.py")
    return at.run()


def assert_clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def charts(at: AppTest) -> int:
    return len(at.get("plotly_chart"))


def test_shipped_runs_exist():
    assert len(RUNS) >= 9, RUNS


def test_home_lists_every_shipped_run():
    at = new_app()
    assert_clean(at)
    table = at.dataframe[0].value
    assert set(RUNS) <= set(table["run"])
    assert charts(at) >= 1  # training curves of the selected run


@pytest.mark.parametrize("run", RUNS)
def test_inspector_runs_on_every_shipped_run(run):
    """Every structure the run's mechanism declares gets a figure; DAMCHA runs say what is learned."""
    at = new_app(run, "inspector")
    assert_clean(at)
    assert not at.error
    assert at.selectbox(key="run").value == run
    loaded = next(r for r in list_runs(SHIPPED)[0] if r.name == run)
    from damcha.inputs.model_inputs import validation_input
    from damcha.runs.checkpoints import load_model

    inp = validation_input(loaded, 0)
    record = __import__("damcha").inspect_input(load_model(loaded), inp.tokens, inp.targets)
    shown = set(in_every_view(at, lambda view: [c.proto.spec for c in view.get("plotly_chart")]))
    specs = " ".join(json.dumps(json.loads(spec), ensure_ascii=False) for spec in shown)
    assert len(shown) >= len(record.structures) + 2  # every structure, attention, and loss or prediction
    for s in record.structures:
        assert s.title.split(" ")[0] in specs, s.title
    if record.structure("metric") is not None:
        assert any("identifiable" in i.value or "every block" in i.value for i in at.info)


def test_digit_upload_and_controls():
    at = new_app("digits-damcha", "inspector")
    at.radio(key="source").set_value("Upload an image").run()
    at.file_uploader(key="upload_image").upload("zero.png", handwritten_digit("0"), "image/png").run()
    assert_clean(at)
    assert not at.error
    assert any("image zero.png" in m.value for m in at.markdown)
    assert charts(at) >= 2  # the input and the open tab's figure: hidden tabs build nothing
    at.slider(key="position").set_value(10).run()
    at.radio(key="mode").set_value("diagonal").run()
    at.toggle(key="shared_scale").set_value(False).run()
    open_tab(at, "Contour & 3D")
    assert charts(at) == 2  # the input and the contours (the 3D surface on request)
    at.radio(key="drawn").set_value("both").run()
    at.radio(key="part").set_value("metric_residue").run()
    assert_clean(at)
    assert charts(at) == 3 and any('"surface"' in c.proto.spec for c in at.get("plotly_chart"))
    open_tab(at, "Attention")
    at.selectbox(key="attn_layer").set_value(1).run()
    assert_clean(at)
    assert any("layer 2" in c.proto.spec for c in at.get("plotly_chart"))


def test_bad_image_upload_shows_a_message_and_the_page_keeps_working():
    at = new_app("digits-damcha", "inspector")
    at.radio(key="source").set_value("Upload an image").run()
    at.file_uploader(key="upload_image").upload("fake.png", b"not really a png", "image/png").run()
    assert_clean(at)
    assert any("Cannot use this input" in e.value and "not a readable image" in e.value for e in at.error)
    at.radio(key="source").set_value("Validation sample").run()
    assert_clean(at)
    assert not at.error and charts(at) >= 2


def test_unshared_run_has_a_layer_control():
    at = new_app("digits-damcha-unshared", "inspector")
    at.selectbox(key="layer").set_value(2).run()
    assert_clean(at)
    specs = in_every_view(at, lambda view: [c.proto.spec for c in view.get("plotly_chart")])
    assert any("layer 2" in spec for spec in specs)


def test_text_typed_uploaded_and_bad():
    at = new_app("text-damcha", "inspector")
    assert_clean(at)
    at.text_area(key="text").set_value("Attention is a metric between tokens. " * 10).run()
    assert_clean(at)
    assert any("the model reads the first 128" in m.value for m in at.markdown)
    at.radio(key="source").set_value("Upload a text file").run()
    at.file_uploader(key="upload_text").upload("para.txt", b"A short paragraph of text.\n", "text/plain").run()
    assert_clean(at)
    assert not at.error and charts(at) >= 1
    at.file_uploader(key="upload_text").upload("blob.txt", b"\x00\x01\x02binary", "text/plain").run()
    assert any("binary" in e.value for e in at.error)
    at.radio(key="source").set_value("Type text").run()
    at.text_area(key="text").set_value("").run()
    assert any("empty" in e.value for e in at.error)
    assert_clean(at)


def test_wrong_root_and_broken_runs_do_not_hide_good_ones(tmp_path):
    at = new_app(root=tmp_path / "does-not-exist")
    assert_clean(at)
    assert any("no such folder" in e.value for e in at.sidebar.error)
    shutil.copytree(SHIPPED / "digits-mha", tmp_path / "good")
    broken = tmp_path / "broken"
    shutil.copytree(SHIPPED / "digits-mha", broken)
    cfg = json.loads((broken / "config.json").read_text())
    cfg["format_version"] = 42
    (broken / "config.json").write_text(json.dumps(cfg))
    at = new_app(root=tmp_path, page="inspector")
    assert_clean(at)
    assert any("broken" in w.value and "format version" in w.value for w in at.sidebar.warning)
    assert at.selectbox(key="run").options == ["good"]
    assert charts(at) >= 2


def test_dynamics_page_slider_comparison_and_projection():
    at = new_app("digits-damcha", "dynamics")
    assert_clean(at)
    assert charts(at) >= 8
    assert any("within-row residual" in m.value for m in at.markdown)
    at.radio(key="view").set_value("contour").run()
    at.selectbox(key="diff_from").set_value(at.selectbox(key="diff_from").options[1]).run()
    other = at.selectbox(key="other")
    unshared = next(o for o in other.options if o.startswith("digits-damcha-unshared"))
    other.set_value(next(r for r in list_runs(SHIPPED)[0] if r.name == "digits-damcha-unshared")).run()
    assert_clean(at)
    assert unshared
    mha = next(r for r in list_runs(SHIPPED)[0] if r.name == "digits-mha")
    at.selectbox(key="other").set_value(mha).run()
    assert_clean(at)
    assert any("Per-head bilinear forms W\\u003csub\\u003eQ" in c.proto.spec for c in at.get("plotly_chart"))  # MHA: its own structure, typeset
    at.radio(key="geo_method").set_value("tsne").run()
    assert_clean(at)
    assert any("Class separation" in m.value for m in at.markdown)


def test_gradients_page_methods_and_integrated_gradients():
    at = new_app("digits-damcha", "gradients")
    assert_clean(at)
    assert charts(at) >= 4
    at.radio(key="method").set_value("gradient").run()
    at.selectbox(key="ig_target").set_value("off_diagonal_energy").run()
    assert_clean(at)
    assert any("convergence delta" in c.value for c in at.caption)
    at = new_app("text-damcha", "gradients")
    assert_clean(at)
    assert any("<span" in m.value for m in at.markdown)


def test_ablation_page_table_and_csv(tmp_path, monkeypatch):
    shipped = new_app("digits-damcha-bilinear", "ablation")  # the shipped runs carry their table
    assert_clean(shipped)
    assert not [t for t in shipped.toggle if t.key == "table_on"] and len(shipped.dataframe) == 3
    monkeypatch.setenv("DAMCHA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("damcha.runs.disk_cache.SHIPPED_FOLDER", "not-shipped")  # runs made without their tables
    root = tmp_path / "runs"  # two digit runs (one of each score form, one with a static metric) and a text run
    for name in ("digits-damcha-bilinear", "digits-damcha-static", "text-damcha"):
        shutil.copytree(SHIPPED / name, root / name)
    at = new_app("digits-damcha-bilinear", "ablation", root)
    assert_clean(at)
    assert len(at.dataframe) == 1, "the every-run table waits to be asked for"
    at.toggle(key="table_on").set_value(True).run()
    assert_clean(at)
    frames = [d.value for d in at.dataframe]
    per_run = frames[-1]
    assert set(per_run["run"]) == {"digits-damcha-bilinear", "digits-damcha-static"}
    from damcha.analysis.ablation import mode_title
    from damcha.runs.checkpoints import load_run

    config = load_run(root / "digits-damcha-bilinear").model_config  # the modes by their titles, not the code's names
    assert set(per_run["mode"]) == {mode_title(config, m.value) for m in __import__("damcha").MetricMode}
    assert "completion_mse" in per_run.columns
    assert "delta_interval" not in per_run.columns and "Δ nll 95% low" in per_run.columns  # flat, as in the CSV
    ablated = per_run[per_run["mode"] != "full"]  # full has no Δ
    assert (ablated["Δ nll 95% low"] <= ablated["Δ nll 95% high"]).all() and per_run["Δ nll 95% low"].notna().any()
    assert any("Bilinear runs" in m.value for m in at.markdown)
    again = new_app("digits-damcha-static", "ablation", root)  # a new session: read from the disk, no toggle needed
    assert_clean(again)
    assert not [t for t in again.toggle if t.key == "table_on"]
    assert set(again.dataframe[-1].value["run"]) == set(per_run["run"])
    at = new_app("text-damcha", "ablation", root)
    assert_clean(at)
    assert any("continues:" in m.value for m in at.markdown)


@pytest.mark.parametrize("run", ["digits-dcmha", "digits-moa", "digits-damcha", "digits-mha"])
def test_interventions_page_patches_each_mechanisms_own_structure(run):
    """The loss changes drawn are the library's (validation input 0 with input 1's structure), in bits."""
    from damcha.analysis.structure_patching import structure_patching
    from damcha.inputs.model_inputs import validation_arrays
    from damcha.runs.checkpoints import load_model, load_run

    at = new_app(run, "interventions")
    assert_clean(at)
    drawn = [json.loads(c.proto.spec) for c in at.get("plotly_chart") if "with the structure of validation" in c.proto.spec]
    loaded = load_run(SHIPPED / run)
    model = load_model(loaded)
    if not model.mechanism.structure_sources(model):
        assert not drawn and any("nothing to patch" in i.value for i in at.info)
        return
    x, y, _ = validation_arrays(loaded)
    patch = structure_patching(model, x[0], y[0], x[1])
    (fig,) = drawn
    several = len(patch.sites) > 1  # "all at once" only where it differs from the one site
    assert fig["data"][0]["x"] == [*patch.sites, *(["all at once"] if several else [])]
    assert "bits per pixel" in json.dumps(fig)
    expected = np.append(patch.changes, patch.all_sites) if several else patch.changes
    assert fig["data"][0]["type"] == "bar"  # a few numbers as bars, not a 1 x n heatmap
    np.testing.assert_allclose(z_of(fig, key="y"), expected / math.log(2), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("run", ["digits-damcha", "images-damcha"])
def test_the_largest_output_change_of_dropping_the_residue_reads_the_same_in_the_metric_and_the_sentence(run):
    """One quantity, one number: the Interventions page's metric for "Keep only the learned part" and the residue
    check's sentence on the same input say the same thing, each to a float32 forward's precision, and name the
    output the model has (a patch model regresses: no logits)."""
    at = new_app(run, "interventions")
    at.selectbox(key="intervention").set_value("drop_residue").run()
    assert_clean(at)
    word = "predicted-vector entry" if run.startswith("images") else "logit"
    (metric,) = [m for m in at.metric if m.label.startswith("Largest change")]
    assert metric.label == f"Largest change of a {word}"
    (sentence,) = [i.value for i in at.info if "Keeping only the learned part" in i.value]
    assert f"largest {word} change {metric.value}," in sentence, (metric.value, sentence)
    assert metric.value.startswith("below float32 rounding (< ")  # the row sum cannot reach the residue


def test_interventions_page_on_damcha_and_on_a_comparison_run():
    at = new_app("digits-damcha", "interventions")
    assert_clean(at)
    assert any("unchanged up to float rounding" in i.value for i in at.info)  # the residue check, row sum
    assert charts(at) >= 7
    gap = [c.value for c in at.caption if c.value.startswith("Adaptivity gap")]
    assert len(gap) == 1 and "expected for any model trained with M(x)" in gap[0]
    assert "the input-dependent metric helps" not in gap[0]  # a positive gap is no evidence that it helps
    at.selectbox(key="intervention").set_value("zero_block").run()
    assert_clean(at)
    at.selectbox(key="intervention").set_value("swap_metric").run()
    assert_clean(at)
    frames = [d.value for d in at.dataframe]
    # in the page's unit (the chart's bits), named with it: the library's nats times 1/ln 2
    assert "mean loss change (bits per pixel)" in frames[-1].columns
    from damcha.analysis.interventions import available_interventions, validation_effects
    from damcha.runs.checkpoints import load_model, load_run

    run = load_run(SHIPPED / "digits-damcha")
    model = load_model(run)
    from app.cached_interventions import _validation

    x, y = _validation(run, 128)
    plain = [iv for iv in available_interventions(model) if all(p.kind not in ("input", "mean") for p in iv.params)]
    nats = {r["intervention"]: r["mean loss change"] for r in validation_effects(model, x, y, plain)}
    shown = dict(zip(frames[-1]["intervention"], frames[-1]["mean loss change (bits per pixel)"]))
    assert nats
    for name, value in nats.items():
        assert shown[name] == pytest.approx(value / math.log(2), rel=1e-6, abs=1e-9)
    at = new_app("digits-damcha-bilinear", "interventions")
    assert_clean(at)
    said = next(i.value for i in at.info if i.value.startswith("Keeping only"))
    assert "each block row's mean m_i / H" in said and "which this form learns" in said and "residue" not in said
    at = new_app("digits-mha", "interventions")
    assert_clean(at)
    assert any("declares no intervention" in i.value for i in at.info)
    ablation = new_app("digits-mha", "ablation")
    said = next(i.value for i in ablation.info if "no metric modes" in i.value)
    assert "declares no intervention of its own" in said and "mean-ablates and patches each head's output" in said
    assert "either" not in said  # the Interventions page offers head ablation, patching and attribution
    # MHA's heads: zero-ablation by default, then mean-ablation and patching, each drawn per (layer, head)
    def head_chart(at):
        return next(c for c in at.get("plotly_chart") if "Loss change per head" in c.proto.spec)

    assert "zero-ablation" in head_chart(at).proto.spec and "bits per pixel" in head_chart(at).proto.spec
    assert any("Direct logit attribution per head" in c.proto.spec for c in at.get("plotly_chart"))
    titles = {"mean": "mean-ablation (over inputs and positions)", "mean_position": "mean-ablation per position",
              "patch": "patching"}
    for kind, title in titles.items():
        at.radio(key="head_kind").set_value(kind).run()
        assert_clean(at)
        assert title in head_chart(at).proto.spec
    at = new_app("digits-moa", "interventions")
    assert_clean(at)
    assert any("experts chosen per token" in i.value for i in at.info)


@pytest.mark.parametrize("page", ["inspector", "dynamics", "gradients", "ablation", "interventions"])
def test_a_run_over_the_inspection_budget_is_viewed_where_asked(page, monkeypatch):
    """With the budget at 1 byte every run counts as paper-sized: matrices at the viewed position
    only, attention fetched per layer, heavy sections behind switches, and no page fails."""
    from damcha.analysis import inspection

    monkeypatch.setattr(inspection, "INSPECTION_BUDGET_BYTES", 1)
    at = new_app("text-damcha", page)
    assert_clean(at)
    if page == "inspector":
        at.slider(key="position").set_value(5).run()
        assert_clean(at)
        assert any("position 5" in (m.value or "") for m in at.caption)
        open_tab(at, "Attention")
        at.selectbox(key="attn_layer").set_value(1).run()
        assert_clean(at)
    else:
        toggles = [t for t in at.toggle if "switch" in (t.help or "") or "paper-sized" in (t.help or "")]
        assert toggles, "heavy sections should wait to be asked"
        toggles[0].set_value(True).run()
        assert_clean(at)


@pytest.mark.parametrize("run, says, never", [
    ("digits-damcha", "comes from the residue alone", "is learned cross-head structure"),
    ("digits-damcha-bilinear", "a departure from it is learned cross-head structure", "residue alone"),
])
def test_the_off_diagonal_share_is_read_as_the_score_form_allows(run, says, never):
    """Under the row sum the learned part has exactly (H−1)/H off-diagonal energy, so a departure is
    residue; only under the bilinear form is it learned (the page once said the opposite)."""
    at = new_app(run, "inspector")
    assert_clean(at)
    text = " ".join(m.value for m in at.markdown if "Off-diagonal blocks hold" in m.value)
    assert says in text and never not in text and "says anything about cross-head structure" not in text


def test_the_learned_part_of_a_row_sum_metric_has_exactly_the_block_count_share():
    from damcha.analysis.inspection import inspect_input, off_diagonal_share
    from damcha.inputs.model_inputs import validation_input
    from damcha.runs.checkpoints import load_model, load_run

    run = load_run(SHIPPED / "digits-damcha")
    inp = validation_input(run, 3)
    record = inspect_input(load_model(run), inp.tokens, inp.targets)
    H = record.n_head
    learned = record.structure("metric_learned").values[0, -1]  # layer 0, last position
    assert off_diagonal_share(learned, H) == pytest.approx((H - 1) / H, abs=1e-9)
    assert abs(off_diagonal_share(record.structure("metric").values[0, -1], H) - (H - 1) / H) > 1e-4  # residue moves it


def test_compare_keeps_its_runs_in_the_link():
    """A Compare link names the runs it shows: a fresh session on it opens the same runs. (Writing a
    new choice back to the address is the browser's part of Streamlit's binding, which AppTest does
    not run; the browser workflow checks it for the Inspector's tabs.)"""
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["run"] = "text-damcha"
    at.query_params["compare_runs"] = ["text-mha"]
    at.switch_page("../pages/compare.py")
    at.run()
    assert_clean(at)
    assert at.multiselect(key="compare_runs").value == ["text-mha"]
    assert "text-mha @" in json.dumps([json.loads(c.proto.spec) for c in at.get("plotly_chart")])
    assert "text-damcha @" not in json.dumps([json.loads(c.proto.spec) for c in at.get("plotly_chart")])


def test_compares_caption_follows_the_part_shown_and_names_each_runs_own_form():
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["run"] = "digits-damcha"
    at.query_params["compare_runs"] = ["digits-damcha", "digits-damcha-bilinear"]
    at.switch_page("../pages/compare.py")
    at.run()
    assert_clean(at)
    part = at.radio(key="compare_part")
    assert "residue (unidentifiable) / deviation from the row mean (learned)" in part.options, part.options

    def caption():
        return next(c.value for c in at.caption if c.value.startswith("The head-grid panels show"))

    expected = {"metric": ("digits-damcha: M(x) (partly identifiable)", "digits-damcha-bilinear: M(x) (learned)"),
                "metric_learned": ("digits-damcha: learned (m_i / H) (learned)",
                                   "digits-damcha-bilinear: row mean (m_i / H) (learned)"),
                "metric_residue": ("digits-damcha: residue (unidentifiable);",
                                   "digits-damcha-bilinear: deviation from the row mean (learned).")}  # said once
    for name, (row_sum, bilinear) in expected.items():
        at.session_state["compare_part"] = name
        at.run()
        assert_clean(at)
        said = caption()
        assert row_sum in said and bilinear in said, said
        assert "(unidentifiable) (unidentifiable)" not in said and "(learned) (learned)" not in said, said
        assert "residue included" not in said or name == "metric"
        assert ("never trains" in said) == (name != "metric_learned")


def test_controls_show_words_not_internal_names():
    at = new_app("digits-damcha", "dynamics")
    assert_clean(at)
    structures = at.selectbox(key="structure")
    assert "M(x)" in structures.options and "metric" not in structures.options, structures.options
    assert structures.value == "metric"  # the URL and the session keep the name
    at = new_app("digits-damcha", "gradients")
    assert_clean(at)
    modes = at.radio(key="mode")
    assert "off diagonal" in modes.options and "off_diagonal" not in modes.options, modes.options


def test_dynamics_draws_a_fixed_structure_once_and_says_so_instead_of_animating_it():
    """MMA's head masks are not trained: an animation of the same mask at every epoch read as a
    structure training keeps in place. DAMCHA's M(x) is still animated."""
    fixed = new_app("digits-mma", "dynamics")
    assert_clean(fixed)
    assert any("is fixed, not trained" in i.value for i in fixed.info)
    assert not any(json.loads(c.proto.spec).get("frames") for c in fixed.get("plotly_chart"))
    trained = new_app("digits-damcha", "dynamics")
    assert not any("is fixed, not trained" in i.value for i in trained.info)
    assert any(json.loads(c.proto.spec).get("frames") for c in trained.get("plotly_chart"))


def test_compare_draws_the_papers_figures_of_several_runs_on_request_and_says_why_not_for_others():
    """Figures 8, 10 and 11 of the paper (a table's figures of several runs no page placed) are offered on
    Compare: drawn for DAMCHA runs from their metrics, refused in words where a run has no M(x)."""
    from damcha.views.run_set_figures import PAPER_FIGURES, RUN_SET_FIGURES

    def compared(runs: list[str]) -> AppTest:
        at = AppTest.from_file(APP, default_timeout=180)
        at.query_params["run"] = runs[0]
        at.query_params["compare_runs"] = runs
        at.switch_page("../pages/compare.py")
        at.run()
        assert_clean(at)
        assert "More figures of these runs" in [h.value for h in at.subheader]
        at.toggle(key="compare_more_on").set_value(True).run()
        assert_clean(at)
        return at

    at = compared(["digits-damcha-static", "digits-damcha"])
    specs = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("paper fig. 8" in s for s in specs) and sum("digits-damcha" in s for s in specs) >= 3
    at = compared(["digits-damcha", "digits-mha"])
    refused = [i.value for i in at.info if "the paper's metric figures need DAMCHA runs" in i.value]
    assert len(refused) == len(PAPER_FIGURES)  # each named by its title, in order
    assert all(r.startswith(f"{RUN_SET_FIGURES[n].title}: ") for r, n in zip(refused, PAPER_FIGURES, strict=True))


def _export_all_clicked(at: AppTest, formats: list[str]) -> None:
    """The page's "Export all" in `formats`, clicked as a user clicks it: the ZIP it offers, opened and checked."""
    from tests.support.exports import checked_archive, page_items

    if at.multiselect(key="exp_all_formats").value != formats:
        at.multiselect(key="exp_all_formats").set_value(formats).run()
    at.button(key="make_all").click().run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    contents, raw = at.session_state["export_all_zip"]
    checked_archive(raw, page_items(at), formats)


@pytest.mark.parametrize("run", ["images-damcha", "text-damcha"])
def test_export_all_on_every_page_makes_the_zip_of_its_figures(run):
    """Each page's ZIP for the modalities the every-mechanism walk (digits, digit classes: tests/app/
    test_every_mechanism.py, its data in every view) does not cover: their data files, as the page holds the
    figures (HTML and the static formats are drawn from the figure alike on every page: the six-format test)."""
    from tests.support.app_views import RUN_PAGES

    for page in RUN_PAGES:
        at = AppTest.from_file(APP, default_timeout=180)
        at.query_params["run"] = run
        at.session_state["exp_all_formats"] = ["csv", "npz"]
        at.switch_page(f"../pages/{page}.py")
        if at.run().session_state["export_registry"]:
            _export_all_clicked(at, ["csv", "npz"])


@pytest.mark.parametrize("page", ["inspector", "dynamics"])
def test_export_all_makes_the_zip_in_all_six_formats(page):
    """Training dynamics' ZIP failed on its cached figures ("float() argument must be ... not 'dict'") with no
    file and no message; with a browser for the static formats (CI) all six, elsewhere the other three."""
    from damcha.views.export import static_export_status

    at = new_app("digits-damcha", page)
    _export_all_clicked(at, ["html", "csv", "npz"] + (["png", "svg", "pdf"] if static_export_status()[0] else []))


def test_a_failed_export_all_says_so_on_the_page_and_names_the_figure(monkeypatch):
    import damcha.views.export as export

    real = export.item_files

    def failing(item, formats, settings=None):
        if item.name == "input":
            raise RuntimeError("the renderer went away")
        return real(item, formats, settings)

    monkeypatch.setattr(export, "item_files", failing)
    at = new_app("digits-damcha", "inspector")
    names = list(at.session_state["export_registry"])
    assert "input" in names, names
    at.multiselect(key="exp_all_formats").set_value(["csv"]).run()
    at.button(key="make_all").click().run()
    assert_clean(at)
    said = " ".join(e.value for e in at.error)
    assert "The ZIP could not be made" in said and "'input'" in said and "the renderer went away" in said
    assert "export_all_zip" not in at.session_state


def test_a_zip_made_for_one_input_is_not_offered_for_another():
    """The ZIP is offered while the page shows the figures it was made of; another validation input's figures
    take the offer away until "Export all" is clicked again."""
    at = new_app("digits-damcha", "inspector")
    at.multiselect(key="exp_all_formats").set_value(["csv"]).run()
    at.button(key="make_all").click().run()

    def offered(view) -> bool:
        return any("Download the ZIP" in str(e.proto) for e in view.get("download_button"))

    assert offered(at)
    at.number_input(key="sample").set_value(5).run()
    assert_clean(at)
    assert not offered(at)
