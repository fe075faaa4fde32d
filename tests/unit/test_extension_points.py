"""Data sets and modalities are declared like mechanisms: nothing outside a data set's or modality's
own module asks its name, every declaration is complete, and the documented example of adding a data
set registers, trains and is inspected in the app."""

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from damcha.inputs import datasets, modalities
from damcha.inputs.datasets import DATA_SETS, DataError, load_dataset
from damcha.inputs.datasets.base import TASKS
from damcha.inputs.modalities import MODALITIES
from damcha.inputs.modalities.base import PICTURES, PREDICTIONS
from damcha.views.figure_sets import PICTURE_FIGURES, PREDICTION_FIGURES
from tests.support.guide_examples import guide_block, guide_figure_registered

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app" / "streamlit_app.py")
OWNERS = {"dataset": ROOT / "damcha" / "inputs" / "datasets", "modality": ROOT / "damcha" / "inputs" / "modalities"}
# A constant is a data-set or modality name only where the other side of the comparison is about one
# ("text" is also an upload kind, "tokens" a tab): the words that say so.
ABOUT = {"dataset": ("dataset", "data"), "modality": ("modality",)}


def _strings(node) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(set(), *(_strings(e) for e in node.elts))
    return set()


def name_branches(source: str, names: dict[str, set[str]], classes: set[str]) -> list[str]:
    """Where `source` branches on a registered name: a comparison or membership test against one,
    a lookup table keyed by two or more, an isinstance test of a modality class, getattr of a
    modality attribute that is not declared."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for kind, registered in names.items():
                for i, side in enumerate(sides):
                    hit = _strings(side) & registered
                    others = " ".join(ast.unparse(s) for j, s in enumerate(sides) if j != i).lower()
                    if hit and any(word in others for word in ABOUT[kind]):
                        found.append(f"line {node.lineno}: compares with {kind} {sorted(hit)}: {ast.unparse(node)}")
        elif isinstance(node, ast.Dict):
            keys = set().union(set(), *(_strings(k) for k in node.keys if k is not None))
            for kind, registered in names.items():
                if len(keys & registered) >= 2:
                    found.append(f"line {node.lineno}: a table keyed by {kind} names {sorted(keys & registered)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            args = [ast.unparse(a) for a in node.args]
            if node.func.id == "isinstance" and len(args) == 2 and set(args[1].strip("()").replace(" ", "").split(",")) & classes:
                found.append(f"line {node.lineno}: isinstance of a modality class: {ast.unparse(node)}")
            if node.func.id == "getattr" and len(args) >= 2 and "modality" in args[0] and args[1].strip("'\"").isidentifier():
                found.append(f"line {node.lineno}: asks a modality for an undeclared attribute: {ast.unparse(node)}")
    return found


def _registered() -> tuple[dict[str, set[str]], set[str]]:
    classes = {type(m).__name__ for m in MODALITIES.values()} - {"Modality"}
    return {"dataset": set(DATA_SETS), "modality": set(MODALITIES)}, classes


def test_nothing_outside_a_data_set_or_modality_module_branches_on_its_name():
    names, classes = _registered()
    files = [*(ROOT / "damcha").rglob("*.py"), *(ROOT / "app").rglob("*.py"), *(ROOT / "pages").rglob("*.py")]
    offenders = []
    for path in sorted(files):
        own = [kind for kind, folder in OWNERS.items() if folder in path.parents]
        branches = name_branches(path.read_text(encoding="utf-8"), {k: v for k, v in names.items() if k not in own},
                                 set() if own else classes)
        offenders += [f"{path.relative_to(ROOT)} {b}" for b in branches]
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("source", [
    'def f(config):\n    return config.modality == "digit_image"\n',
    'def f(run):\n    return run.dataset in ("digits", "text")\n',
    'UNIT = {"byte_text": "char", "digit_image": "pixel"}\n',
    'def f(record):\n    return isinstance(record.modality, ImagePatches)\n',
    'def f(record):\n    return getattr(record.modality, "next_patch", False)\n',
])
def test_the_check_sees_each_kind_of_name_branch(source):
    assert name_branches(source, *_registered())


def test_the_check_leaves_other_vocabularies_alone():
    source = 'def f(modality, tabs):\n    return modality.upload == "text" or "tokens" in tabs or {"image": 1, "text": 2}\n'
    assert not name_branches(source, *_registered())


@pytest.mark.parametrize("name", sorted(MODALITIES))
def test_every_modality_declares_kinds_the_views_can_draw(name):
    m = MODALITIES[name]
    assert m.picture is None or (m.picture in PICTURES and m.picture in PICTURE_FIGURES and m.grid)
    assert m.prediction is None or (m.prediction in PREDICTIONS and m.prediction in PREDICTION_FIGURES)
    assert m.unit and m.classified_unit and m.blank_description
    with pytest.raises(ValueError, match="none of"):
        type(m)(**{**m.__dict__, "picture": "hologram"})


@pytest.mark.parametrize("name", sorted(DATA_SETS))
def test_every_data_set_declares_a_registered_modality_and_task(name):
    spec = DATA_SETS[name]
    assert spec.modality in MODALITIES and spec.task in TASKS
    assert spec.bundled != bool(spec.needs_path), "a data set either ships or needs the user's path"
    assert spec.unit == MODALITIES[spec.modality].metric_unit(spec.task)
    if spec.needs_path:
        with pytest.raises(DataError, match=re.escape(f"needs --data-path to {spec.needs_path}")):
            load_dataset(name)


@pytest.mark.parametrize("name", sorted(n for n, s in DATA_SETS.items() if s.bundled))
def test_a_bundled_data_set_loads_as_declared(name):
    spec = DATA_SETS[name]
    data = load_dataset(name, block_size=32)
    assert (data.name, data.task, data.modality, data.unit) == (name, spec.task, spec.modality, spec.unit)
    assert data.stream == (data.train_inputs is None)
    if spec.task == "classification":
        assert data.n_classes > 0 and data.val_targets.ndim == 1
    if spec.task == "next_vector":
        assert data.val_inputs.ndim == 3


def test_an_unknown_modality_or_task_is_refused_at_declaration():
    with pytest.raises(ValueError, match="modality 'smell' is not registered"):
        datasets.DataSetSpec("x", "x", "smell", "next_token", lambda *a: None)
    with pytest.raises(ValueError, match="task 'dream'"):
        datasets.DataSetSpec("x", "x", "tokens", "dream", lambda *a: None)


def _guide_block(heading: str) -> str:
    return guide_block("extending.md", heading)


def test_the_documented_data_set_example_registers_trains_and_is_inspected(tmp_path):
    from streamlit.testing.v1 import AppTest

    from damcha import ModelConfig, variant_config
    from damcha.inputs.model_inputs import validation_input
    from damcha.runs.checkpoints import load_run
    from damcha.runs.train import TrainConfig, train

    exec(compile(_guide_block("## Adding a data set"), "docs/extending.md", "exec"), {})
    try:
        data = load_dataset("echo")
        assert (data.modality, data.unit, data.task) == ("tokens", "token", "next_token")
        base = ModelConfig(n_layer=1, n_head=4, n_embd=16, attention_options={"generator_widths": (8,)})
        train(variant_config(base, "damcha"), TrainConfig(dataset="echo", epochs=1, batch_size=50),
              tmp_path / "echo-damcha", progress=False)
        run = load_run(tmp_path / "echo-damcha")
        assert run.model_config.modality == "tokens" and run.data["unit"] == "token"
        assert "val_bits_per_token" in run.metrics[-1]
        sample = validation_input(run, 3)
        assert sample.source == "validation sample 3" and np.array_equal(sample.tokens, data.val_inputs[3].numpy())

        at = AppTest.from_file(APP, default_timeout=120)
        at.session_state["checkpoint_root"] = str(tmp_path)
        at.switch_page("../pages/inspector.py")
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert not at.error and not at.warning
        specs = [c.proto.spec for c in at.get("plotly_chart")]
        assert any("M(x)" in s for s in specs), "the run's metric is drawn"
    finally:
        datasets.unregister("echo")
        modalities.modality_named("tokens")  # the registry of modalities is untouched by the example
    assert "echo" not in DATA_SETS


SHIPPED = ROOT / "checkpoints"


def _record(run_name: str, index: int = 2):
    from damcha.analysis.inspection import inspect_input
    from damcha.inputs.model_inputs import validation_input
    from damcha.runs.checkpoints import load_model, load_run

    run = load_run(SHIPPED / run_name)
    inp = validation_input(run, index)
    return run, inp, inspect_input(load_model(run), inp.tokens, inp.targets)


def test_the_documented_figure_example_is_listed_exported_and_rebuilt_from_its_provenance():
    from damcha.views.export import figure_data
    from damcha.views.figure_sets import RECORD_FIGURES, available_figures
    from damcha.views.model_figures import figure_set
    from damcha.views.regeneration import regenerate

    exec(compile(_guide_block("## Adding a figure"), "docs/extending.md", "exec"), {})
    try:
        run, inp, record = _record("digits-damcha")
        assert "attention_entropy" in available_figures(record)
        (item,) = figure_set(run, [run.epochs[-1]], inp.tokens, inp.targets, names=["attention_entropy"])
        p = np.clip(record.attention_map(0), 1e-12, 1)
        expected = -(p * np.log2(p)).sum(-1)  # (H, T)
        shown = [v for k, v in sorted(figure_data(item.figure).items()) if k.endswith("_y")]
        np.testing.assert_allclose(np.sort(np.stack(shown), axis=0), np.sort(expected, axis=0), rtol=1e-5)
        assert item.provenance.regenerable and item.provenance.figure == "attention_entropy"
        again = regenerate(item.provenance)
        assert figure_data(again.figure).keys() == figure_data(item.figure).keys()
        for k, v in figure_data(item.figure).items():
            np.testing.assert_array_equal(figure_data(again.figure)[k], v)
        # and the Inspector offers it, under More figures, though no page names it
        from streamlit.testing.v1 import AppTest

        at = AppTest.from_file(str(ROOT / "app" / "streamlit_app.py"), default_timeout=120)
        at.query_params["run"] = "digits-damcha"
        at.switch_page("../pages/inspector.py")
        at.run()
        assert "More figures" in [t.label for t in at.tabs]
        at.session_state["tab"] = "More figures"
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert any("Attention entropy, layer 1" in c.proto.spec for c in at.get("plotly_chart"))
    finally:
        RECORD_FIGURES.pop("attention_entropy", None)


def test_the_pages_offer_every_figure_of_their_tables_that_no_page_places():
    """What the pages place is read from their source; the rest of each table is offered under More figures
    (today the paper's figures 8, 10 and 11 of several runs, on Compare, which had been the CLI's alone)."""
    from app.named_figures import not_placed, placed_by_pages
    from damcha.views.figure_sets import RECORD_FIGURES
    from damcha.views.model_figures import MODEL_FIGURES
    from damcha.views.run_set_figures import PAPER_FIGURES, RUN_SET_FIGURES

    assert {"decomposition", "attention", "epoch_animation", "comparison"} <= placed_by_pages()
    assert not_placed([*RECORD_FIGURES, *MODEL_FIGURES]) == []
    with guide_figure_registered() as added:  # a figure added as docs/extending.md says: offered, not lost
        assert added and not_placed([*RECORD_FIGURES, *MODEL_FIGURES]) == added
    assert not_placed(RUN_SET_FIGURES) == list(PAPER_FIGURES)
    assert not_placed(["a_figure_no_page_names"]) == ["a_figure_no_page_names"]


def test_a_page_places_what_it_declares_and_no_other_string_it_writes_places_a_figure():
    """"Placed by a page" was any string in pages/*.py: a new figure named like a column ("input" on the data
    table, "label") or a panel ("attention" on Compare) was kept off More figures. Each page declares what it
    places; every figure it passes to a show function by name is declared, every declared name is a figure."""
    import ast

    from app.named_figures import PAGES_FOLDER, declared_placements, not_placed
    from damcha.evidence.view import EVIDENCE_FIGURES
    from damcha.views.epoch_figures import EPOCH_FIGURES
    from damcha.views.figure_sets import RECORD_FIGURES
    from damcha.views.model_figures import MODEL_FIGURES
    from damcha.views.run_set_figures import RUN_SET_FIGURES

    figures = {*RECORD_FIGURES, *EPOCH_FIGURES, *MODEL_FIGURES, *RUN_SET_FIGURES, *EVIDENCE_FIGURES}
    for page in sorted(PAGES_FOLDER.glob("*.py")):
        declared = declared_placements(page)
        assert set(declared) <= figures, (page.name, set(declared) - figures)
        shown = {call.args[0].value for call in ast.walk(ast.parse(page.read_text())) if isinstance(call, ast.Call)
                 and isinstance(call.func, ast.Name) and call.func.id.startswith("show_") and call.args
                 and isinstance(call.args[0], ast.Constant)}
        assert shown <= set(declared), (page.name, shown - set(declared))
    table = (PAGES_FOLDER / "table.py").read_text()
    assert '"label"' in table and '"input"' in table  # column names the data table writes
    assert not_placed(["label", "input_column_figure"]) == ["label", "input_column_figure"]


@pytest.mark.parametrize("run_name", ["digits-damcha", "digits-cls-mha", "text-mha", "images-damcha"])
def test_a_figure_that_does_not_apply_says_why_in_the_words_of_its_declaration(run_name):
    from damcha.views.figure_sets import RECORD_FIGURES, available_figures, build_figure
    from damcha.views.model_figures import MODEL_FIGURES

    if not (SHIPPED / run_name).is_dir():
        pytest.skip(f"{run_name} is not shipped")
    run, inp, record = _record(run_name)
    listed = available_figures(record)
    for name, figure in RECORD_FIGURES.items():
        why = figure.missing(record)
        assert (why is None) == (name in listed), name
        if why:
            with pytest.raises(ValueError) as e:
                build_figure(name, record, {})
            assert str(e.value) == why
        else:
            assert build_figure(name, record, {}).data, name
    for figure in MODEL_FIGURES.values():
        why = figure.missing(record, run.model_config)
        assert why is None or why[0].isalpha()


def test_the_per_position_loss_is_drawn_in_bits_not_nats():
    from damcha.views.export import figure_data
    from damcha.views.figure_sets import build_figure

    _, _, record = _record("digits-damcha")
    fig = build_figure("token_loss", record, {})
    shown = np.concatenate([v for k, v in figure_data(fig).items() if k.endswith("_y")])
    np.testing.assert_allclose(np.sort(shown), np.sort(np.nan_to_num(record.token_loss) / np.log(2)), rtol=1e-6)
    assert "bits" in fig.layout.title.text


def test_the_verdicts_recomputed_from_the_shipped_values_are_the_shipped_verdicts():
    """The claims, declared by variant, count the same comparisons as the shipped results (computed
    before the catalogue was split and when comparisons were still chosen by display-name prefix)."""
    import json

    from damcha.evidence.catalogue import claims
    from damcha.evidence.results import summarise

    shipped = json.loads((SHIPPED / "evidence" / "results.json").read_text())
    known = {c.key: c for c in claims(bool(shipped["quick"]))}
    for stored in shipped["claims"]:
        claim = known[stored["key"]]
        again = summarise(claim, stored["values"], shipped["sanity"])
        assert again["verdict"] == stored["verdict"], claim.key
        keyed = [(c["metric"], c["better"], c["than"], c["counted"]) for c in again["comparisons"]]
        assert keyed == [(c["metric"], c["better"], c["than"], c["counted"]) for c in stored["comparisons"]], claim.key


def test_the_documented_claim_example_runs_and_the_evidence_page_shows_it(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from damcha.evidence import catalogue
    from damcha.evidence.runner import run_evidence
    from damcha.evidence.statistics import HOLDS

    exec(compile(_guide_block("## Adding a claim"), "docs/extending.md", "exec"), {})
    try:
        assert "nn_beats_mean" in [c.key for c in catalogue.claims(True)]
        doc = run_evidence(tmp_path / "out", tmp_path / "work", quick=True, seeds=2, only=["nn_beats_mean"])
        (result,) = doc["claims"]
        assert result["verdict"] == HOLDS and result["comparisons"][0]["counted"]
        monkeypatch.setenv("DAMCHA_EVIDENCE", str(tmp_path / "out"))
        at = AppTest.from_file(APP, default_timeout=120)
        at.switch_page("../pages/evidence.py")
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        title = "Top-half 1-NN against the training mean (digits completion)"
        assert list(at.dataframe[0].value["claim"]) == [title]
        assert title in [h.value for h in at.header]
        assert any("holds" in m.value for m in at.markdown)
    finally:
        catalogue.unregister("nn_beats_mean")
    assert "nn_beats_mean" not in [c.key for c in catalogue.claims(True)]


def test_every_page_file_has_its_menu_line_and_every_line_its_file():
    from app.navigation import PAGES, PAGES_DIR

    assert sorted(e.path.name for e in PAGES) == sorted(p.name for p in PAGES_DIR.glob("*.py"))
    assert len({e.url_path for e in PAGES}) == len(PAGES) and sum(not e.url_path for e in PAGES) == 1


def test_the_documented_page_example_is_in_the_menu_and_renders(tmp_path):
    from streamlit.testing.v1 import AppTest

    from app.navigation import PAGES

    scope = {}
    exec(compile(_guide_block("## Adding a page"), "docs/extending.md", "exec"), scope)
    before = list(PAGES)
    try:
        scope["add_parameters_page"](tmp_path)
        at = AppTest.from_file(APP, default_timeout=120)
        at.session_state["checkpoint_root"] = str(SHIPPED)
        at.query_params["run"] = "digits-damcha"
        at.switch_page(str(tmp_path / "parameters.py"))
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert [t.value for t in at.title] == ["Parameters"]
        table = at.dataframe[0].value
        from damcha.runs.checkpoints import load_model, load_run

        model = load_model(load_run(SHIPPED / "digits-damcha"))
        assert int(table["parameters"].sum()) == sum(p.numel() for p in model.parameters())
    finally:
        PAGES[:] = before


def test_the_mechanism_guide_names_every_member_of_the_protocol():
    """docs/mechanisms.md's member table: every public member of Mechanism (its class body and its annotated
    ClassVars) is a row, and no row names a member it does not have."""
    import re

    from damcha.model.mechanisms.base import Mechanism

    members = {n for n in (*vars(Mechanism), *Mechanism.__annotations__) if not n.startswith("_")}
    text = (ROOT / "docs" / "mechanisms.md").read_text()
    table = text[text.index("### Every member of `Mechanism`"):]
    rows = set(re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.M))
    assert rows == members, (sorted(members - rows), sorted(rows - members))


GUIDES = ("extending.md", "mechanisms.md")


@pytest.mark.parametrize("guide", GUIDES)
def test_every_code_block_of_a_guide_passes_the_projects_lint(guide):
    """A reader copies a guide's block into a module of the package: it must pass the lint the package's own
    modules pass (the mechanism guide's import block did not: ruff's import order)."""
    import shutil
    import subprocess
    import sys

    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    text = (ROOT / "docs" / guide).read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    for i, block in enumerate(blocks):
        found = subprocess.run([ruff, "check", "--config", str(ROOT / "pyproject.toml"), "--stdin-filename",
                                str(ROOT / "damcha" / f"guide_block_{i}.py"), "-"], input=block, capture_output=True,
                               text=True)
        assert found.returncode == 0, f"docs/{guide}, block {i + 1}:\n{found.stdout}"


@pytest.mark.parametrize("guide", GUIDES)
def test_every_guide_ends_with_its_checklist_naming_real_files_and_the_tests_that_walk_the_extension(guide):
    """Each extension's section ends with its checklist: the files to add or edit (docs/design.md among them,
    which a test holds to name every module) and the tests that will walk the new extension; every path a
    checklist names exists."""
    text = (ROOT / "docs" / guide).read_text(encoding="utf-8")
    sections = [part for part in re.split(r"^## ", text, flags=re.M)[1:] if part.startswith("Adding")]
    assert sections
    for section in sections:
        checklist = section[section.rindex("**Checklist"):] if "**Checklist" in section else ""
        assert checklist, f"docs/{guide}: '{section.splitlines()[0]}' has no checklist"
        assert "docs/design.md" in checklist and "tests/" in checklist, section.splitlines()[0]
        for path in re.findall(r"`((?:damcha|tests|docs|app|pages)/[\w/.]+\.(?:py|md))`", checklist):
            assert (ROOT / path).exists(), (section.splitlines()[0], path)


@pytest.mark.parametrize("name", sorted(n for n, m in MODALITIES.items() if m.picture))
def test_a_pictures_last_cell_is_outlined_on_the_picture(name):
    """The cell a query position reads, outlined where it lies: a pixel model's last pixel, a patch model's last patch."""
    m = MODALITIES[name]
    rows, cols = m.grid
    side = 32 if m.picture == "rgb" else rows
    picture = np.zeros((side, side, 3), np.uint8) if m.picture == "rgb" else np.zeros((rows, cols))
    fig = PICTURE_FIGURES[m.picture](picture, m.picture_caption, (rows - 1, cols - 1), "last cell", m.grid)
    rects = [s for s in fig.layout.shapes if s.type == "rect"]
    assert rects, "the cell is outlined"
    assert max(s.x1 for s in rects) == pytest.approx(side - 0.5) and max(s.y1 for s in rects) == pytest.approx(side - 0.5)
    assert min(s.x0 for s in rects) == pytest.approx((cols - 1) * side / cols - 0.5)
