"""A mechanism's per-call choices travel under one name (`options`) from the pages and the command line
into figures and their provenance; DAMCHA reaches the generic code only through its protocol."""

import ast
import json
from pathlib import Path

import numpy as np
import pytest

from damcha import DamchaOptions, inspect_input
from damcha.__main__ import main
from damcha.analysis.ablation import ablation_modes
from damcha.inputs.model_inputs import validation_input
from damcha.model.mechanisms import get_mechanism, mechanism_names
from damcha.runs.checkpoints import load_model, load_run
from damcha.views.export import Provenance
from damcha.views.regeneration import regenerate

ROOT = Path(__file__).resolve().parents[2]
DAMCHA_PACKAGE = "damcha/model/mechanisms/damcha/"
# The only places outside DAMCHA's package that may name it: the registry that registers it, and the
# package face that lists the public names (DamchaOptions, MetricMode) for `from damcha import ...`.
MAY_NAME_DAMCHA = {"damcha/model/mechanisms/__init__.py", "damcha/__init__.py"}
# DAMCHA's own types, per-call choices and internals, as code names them.
DAMCHA_NAMES = ("DamchaOptions", "MetricMode", "metric_mode", "metric_sources", "MetricSource", "HeadMetric",
                "within_row_residual", "as_blocks", "DamchaMetricAccess")


# DAMCHA's settings that were ModelConfig fields until December 2026 (config.MOVED_SETTINGS), and the few
# modules that may name them, each with why.
DAMCHA_SETTINGS = ("metric_sharing", "metric_input", "score_form", "generator_widths", "generator_dropout")
MAY_NAME_DAMCHA_SETTINGS = {
    "damcha/model/config.py": "the load shim: saved runs hold them as top-level fields",
    "damcha/runs/reference.py": "the authors' reference checkpoints are DAMCHA's; reading one sets its settings",
    "damcha/runs/train_flags.py": "--generator-widths and --generator-dropout, flags since these were fields",
    "damcha/evidence/scales.py": "the paper's sizes of f at its scale",
    "damcha/evidence/catalogue/common.py": "claims about DAMCHA's f: its widths by depth",
    "damcha/evidence/catalogue/table3_depth.py": "Table 3 sweeps the depth of f",
    "damcha/inputs/synthetic.py": "a synthetic-task model of DAMCHA's (the static bilinear form)",
}


def _library_modules():
    for folder in ("damcha", "pages", "app"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith(DAMCHA_PACKAGE) and rel not in MAY_NAME_DAMCHA:
                yield rel, path


def test_no_module_outside_damchas_package_imports_it_or_names_its_types():
    offences = []
    for rel, path in _library_modules():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("damcha.model.mechanisms.damcha"):
                offences.append(f"{rel}:{node.lineno} imports {node.module}")
            elif isinstance(node, ast.Name | ast.Attribute):
                name = node.id if isinstance(node, ast.Name) else node.attr
                if name in DAMCHA_NAMES:
                    offences.append(f"{rel}:{node.lineno} names {name}")
            elif isinstance(node, ast.Constant) and node.value in DAMCHA_NAMES:
                offences.append(f"{rel}:{node.lineno} names {node.value!r}")
            if rel not in MAY_NAME_DAMCHA_SETTINGS:
                named = (node.attr if isinstance(node, ast.Attribute) else node.arg if isinstance(node, ast.keyword)
                         else node.value if isinstance(node, ast.Constant) else None)
                if named in DAMCHA_SETTINGS:
                    offences.append(f"{rel}:{node.lineno} names DAMCHA's setting {named}")
    assert not offences, "\n".join(offences)


def test_damchas_settings_are_its_own_and_every_saved_run_reads_them_as_before():
    """The five settings that were ModelConfig fields are DAMCHA's declared settings now: no field of
    ModelConfig, every one declared by DAMCHA; a config saved with them as fields (every run saved before,
    of any mechanism) loads to the config that names them as settings, or, for a mechanism without them,
    to the config without them (they were fields no layer read)."""
    import dataclasses

    from damcha.model.config import MOVED_SETTINGS, ModelConfig, variant_config

    assert set(MOVED_SETTINGS) == set(DAMCHA_SETTINGS)
    assert not set(DAMCHA_SETTINGS) & {f.name for f in dataclasses.fields(ModelConfig)}
    assert set(DAMCHA_SETTINGS) <= set(get_mechanism("damcha").config_options)
    saved = {**{k: v for k, v in ModelConfig().to_dict().items() if k != "attention_options"},
             "metric_sharing": "per_layer", "metric_input": "adaptive", "score_form": "bilinear",
             "generator_widths": [8, 16], "generator_dropout": 0.1}
    loaded = ModelConfig.from_dict(saved)
    assert loaded == ModelConfig(attention_options={"metric_sharing": "per_layer", "score_form": "bilinear",
                                                    "generator_widths": (8, 16), "generator_dropout": 0.1})
    assert [loaded.setting(k) for k in DAMCHA_SETTINGS] == ["per_layer", "adaptive", "bilinear", (8, 16), 0.1]
    assert ModelConfig.from_dict({**saved, "attention": "mha"}) == variant_config(ModelConfig(), "mha")
    for run in sorted((ROOT / "checkpoints").glob("*/config.json")):  # the shipped runs, saved with them as fields
        model = json.loads(run.read_text())["model"]
        assert set(DAMCHA_SETTINGS) <= set(model), run.parent.name
        config = ModelConfig.from_dict(model)
        if "generator_widths" in config.mechanism.config_options:
            assert config.setting("generator_widths") == tuple(model["generator_widths"]), run.parent.name


def test_the_confinement_rule_finds_what_it_forbids(tmp_path):
    """The rule above can fail: the old way of asking for a metric mode is an offence to it."""
    tree = ast.parse('options = model.mechanism.options_from({"metric_mode": "diagonal"})')
    assert any(isinstance(n, ast.Constant) and n.value in DAMCHA_NAMES for n in ast.walk(tree))
    tree = ast.parse("widths = model.config.generator_widths")
    assert any(isinstance(n, ast.Attribute) and n.attr in DAMCHA_SETTINGS for n in ast.walk(tree))
    tree = ast.parse("from damcha.model.mechanisms.damcha.layer import metric_sources")
    assert any(isinstance(n, ast.ImportFrom) and n.module.startswith("damcha.model.mechanisms.damcha")
               for n in ast.walk(tree))


@pytest.mark.parametrize("name", mechanism_names())
def test_what_a_mechanism_declares_for_ablation_and_its_metric_is_whole(name):
    mechanism = get_mechanism(name)
    ablation = mechanism.inference_ablation
    if ablation is not None:
        choice = mechanism.choice(ablation.choice)
        assert choice is not None, f"{name} ablates {ablation.choice!r}, which is not one of its option_choices"
        mechanism.options_from({ablation.choice: choice.values[0]})
    metric_kinds = {mechanism.metric(cfg) for cfg in _configs_of(name)}
    assert (mechanism.metric_access() is not None) == (metric_kinds != {None}), \
        f"{name}: a metric {metric_kinds} needs a MetricAccess, and only a metric has one"


def _configs_of(name):
    from damcha import ModelConfig
    from damcha.model.config import variant_config
    from damcha.model.mechanisms import variants

    return [variant_config(ModelConfig(), v.name) for v in variants() if v.mechanism == name]


def test_the_cli_draws_a_figure_under_the_chosen_option_and_keeps_it_in_the_provenance(tmp_path):
    run = load_run(ROOT / "checkpoints" / "digits-damcha")
    out = tmp_path / "figs"
    assert main(["figures", "--run", str(run.path), "--epochs", str(run.epochs[-1]), "--val-index", "1",
                 "--figures", "head_metrics", "--option", "metric_mode=diagonal", "--formats", "npz",
                 "--out", str(out)]) == 0
    prov = json.loads(next(out.glob("*head_metrics.provenance.json")).read_text())
    assert prov["params"]["options"] == {"metric_mode": "diagonal"} and "mode" not in prov["params"]
    inp = validation_input(run, 1)
    model = load_model(run)
    expected = inspect_input(model, inp.tokens, inp.targets, options=DamchaOptions(metric_mode="diagonal"))
    full = inspect_input(model, inp.tokens, inp.targets)
    drawn = np.load(next(out.glob("*head_metrics.npz")))
    shown = np.stack([drawn[k] for k in sorted(drawn.files)])  # one heatmap per head: (H, d, d)
    index = expected.position_index(-1)
    want = expected.structure("head_metrics").at(layer=0, position=index)
    np.testing.assert_allclose(shown, want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(want, full.structure("head_metrics").at(layer=0, position=index))  # the choice mattered


@pytest.mark.parametrize("args, words", [
    (["--option", "metric_mode=sideways"], "unknown metric mode 'sideways'"),
    (["--option", "temperature=2"], "has no option 'temperature'"),
    (["--option", "metric_mode"], "expected NAME=VALUE"),
])
def test_the_cli_refuses_a_choice_in_words(tmp_path, capsys, args, words):
    run = ROOT / "checkpoints" / "digits-damcha"
    try:
        code = main(["figures", "--run", str(run), "--val-index", "0", "--figures", "metric", "--formats", "csv",
                     *args, "--out", str(tmp_path / "o")])
    except SystemExit as e:  # argparse refuses a malformed NAME=VALUE itself
        code = e.code
    assert code == 2 and words in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_choice_another_mechanism_has_is_refused_unless_it_asks_for_the_model_as_trained(tmp_path, capsys):
    run = ROOT / "checkpoints" / "digits-mha"
    base = ["figures", "--run", str(run), "--val-index", "0", "--figures", "attention", "--formats", "csv"]
    assert main([*base, "--option", "metric_mode=diagonal", "--out", str(tmp_path / "a")]) == 2
    assert "has no option 'metric_mode'" in capsys.readouterr().err
    assert main([*base, "--option", "metric_mode=full", "--out", str(tmp_path / "b")]) == 0


def test_a_provenance_written_with_the_old_mode_field_rebuilds_under_that_mode():
    run = load_run(ROOT / "checkpoints" / "digits-damcha")
    inp = validation_input(run, 2)
    epoch = run.epochs[-1]
    old = Provenance.of("head_metrics", run, epoch, inp.tokens, inp.targets, inp.source,
                        {"layer": 0, "position": -1, "mode": "off_diagonal"}, regenerable=True)
    item = regenerate(Provenance.from_dict(json.loads(json.dumps(old.to_dict()))))
    assert item.provenance.params["options"] == {"metric_mode": "off_diagonal"}
    record = inspect_input(load_model(run, epoch), inp.tokens, inp.targets,
                           options=DamchaOptions(metric_mode="off_diagonal"))
    assert "(off_diagonal)" in item.figure.layout.title.text
    assert record.structure("head_metrics").drawn_under == "off_diagonal"


def test_the_ablation_modes_are_the_declared_choice_and_absent_for_a_mechanism_without_one():
    damcha = load_run(ROOT / "checkpoints" / "digits-damcha").model_config
    assert ablation_modes(damcha) == damcha.mechanism.choice("metric_mode").values
    assert ablation_modes(load_run(ROOT / "checkpoints" / "digits-mha").model_config) == ()
