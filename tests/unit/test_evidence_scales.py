"""The evidence at another scale: claims moved onto the standard data sets at the scale's model size, the
files located and checked, all before anything trains (the budget: test_costs.py)."""

import dataclasses
import json
from pathlib import Path

import pytest

from damcha.__main__ import main
from damcha.evidence.capacity import model_parameters
from damcha.evidence.catalogue import claims
from damcha.evidence.scales import (
    PAPER,
    PAPER_GENERATOR_WIDTHS,
    PAPER_WIDTHS_DEVIATION,
    SCALES,
    TINY,
    check_data,
    locate_data,
    scale_claims,
)
from damcha.evidence.setting import Setting
from damcha.inputs.datasets import DataError, data_set_spec
from damcha.inputs.datasets.generated import write_standard_format_files

ROOT = Path(__file__).resolve().parents[2]
MOVED_BASELINE = {"top half's mean colour": "training tokens' frequencies"}  # a pixel model's baseline is a likelihood


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("standard-formats")
    write_standard_format_files(folder)
    return folder


@pytest.fixture(scope="module")
def tiny(data_dir):
    return Setting(TINY, locate_data(TINY, data_dir))


def test_a_scale_moves_each_claim_onto_the_data_its_demo_data_stand_for(tiny):
    moved = {c.key: c for c in scale_claims(TINY, tiny)}
    assert set(moved) == {"table1_images@cifar10-pixels", "table2_efficiency@tiny", "table3_depth@cifar10-pixels",
                          "table4_ablations@cifar10-pixels", "table5_text@enwik8", "table5_text@text8"}
    demo = {c.key: c for c in claims(TINY.smoke)}
    for key, claim in moved.items():
        base = demo[key.split("@")[0]]
        if base.arms_at_scale is None:  # the same arms, seeds and verdict rule (Table 3: its depths, below)
            assert [a.name for a in claim.arms] == [MOVED_BASELINE.get(a.name, a.name) for a in base.arms]
            assert claim.reference == base.reference
        assert (claim.verdict_against, claim.controls, claim.min_seeds) == \
               (base.verdict_against, tuple(MOVED_BASELINE.get(c, c) for c in base.controls), base.min_seeds)
        for arm in claim.arms:
            if arm.kind == "train":
                assert arm.dataset == key.split("@")[1]
                own = ("n_embd", "generator_widths") if base.arms_at_scale else ("n_embd",)  # (Table 3: f's own widths)
                assert dict(arm.overrides).items() >= {k: v for k, v in TINY.model.items() if k not in own}.items()
    table4 = moved["table4_ablations@cifar10-pixels"]  # digits' likelihood is the pixel model's; it completes nothing
    assert table4.metric == "val_nll" and table4.compared == ("val_nll",) and table4.columns == ("test_nll",)
    images = moved["table1_images@cifar10-pixels"]  # the patches' completion error becomes the pixel model's loss
    assert (images.metric, images.columns, images.title) == \
           ("val_nll", ("test_nll",), "Table 1 ranking: colour images, validation NLL — on " + data_set_spec("cifar10-pixels").title)
    baseline = next(a for a in images.arms if a.kind == "baseline")  # the top half's colour completes no pixel model
    assert (baseline.task, baseline.dataset) == ("token_frequencies", "cifar10-pixels") and baseline.name in images.controls
    assert moved["table5_text@text8"].metric == "val_bits_per_char"
    assert dict(moved["table5_text@enwik8"].arms[0].overrides)["block_size"] == TINY.place("enwik8").block_size


def test_each_data_set_at_a_scale_stands_beside_its_own_published_numbers_never_another_s(tiny):
    """text8 was compared with enwik8's published cross-entropies: a scale's claim on a data set carries
    the paper's numbers for that data set, or none."""
    import math

    from damcha.inputs.datasets import DATA_SETS, data_set_spec

    moved = {c.key: c for c in scale_claims(TINY, tiny)}
    in_bits = {m: round(v / math.log(2), 4) for m, v in {"mha": 1.06, "dcmha": 1.05, "damcha": 1.03}.items()}
    assert moved["table5_text@text8"].paper == in_bits  # the paper's Table 5 row for Text8
    assert moved["table5_text@enwik8"].paper["mha"] == round(1.07 / math.log(2), 4)
    assert moved["table1_images@cifar10-pixels"].paper == {}  # Table 1's CIFAR-10 numbers are MSE; the claim reads NLL
    assert moved["table4_ablations@cifar10-pixels"].paper == {}  # the paper gives none there
    demo = {c.key: c for c in claims(TINY.smoke)}
    for key, claim in moved.items():
        row = data_set_spec(key.split("@")[1]).paper_row if key.split("@")[1] in DATA_SETS else ""
        assert claim.paper == demo[key.split("@")[0]].paper_on.get(row, {}), key


def test_a_claim_at_a_scale_says_nothing_of_the_demos_data_and_declares_where_it_departs_from_the_paper(tiny):
    """A claim at a scale keeps no demo-only note or gap ("bundled corpus", "NLL on digits"), and every claim with
    the paper's numbers there declares what stands beside them differently (unit, split, tokens, training)."""
    demo_words = ("bundled", "digits", "crops", "sample images", "pydoc", "shipped text corpus", "minutes")
    for claim in scale_claims(TINY, tiny):
        if "@tiny" in claim.key:  # Table 2: timed, no data set moved
            continue
        said = " ".join([claim.note.split(" here. ", 1)[1], *claim.cannot_speak_to]).lower()  # (after "the demo's
        # digits data are CIFAR-10 here")
        assert not [w for w in demo_words if w in said], (claim.key, said)
        training = claim.deviations[-1]
        place = TINY.place(claim.key.split("@")[1])
        assert training.startswith("Training: every arm") and f"({place.train['lr']:g}" in training
        if claim.paper:
            assert len(claim.deviations) >= 3, claim.key


def test_the_paper_scale_declares_its_own_widths_of_f_on_every_claim_it_runs(data_dir):
    """Section 5.1 gives f 9 layers and no widths: every paper-scale claim (Table 2's timing too) says the widths
    are ours; the rehearsal, which claims no paper size, declares nothing of the kind."""
    paper = Setting(dataclasses.replace(PAPER, nonstandard_ok=True), locate_data(PAPER, data_dir))
    at_paper = scale_claims(PAPER, paper)
    assert {c.key.split("@")[0] for c in at_paper} == set(PAPER.claims)
    assert all(PAPER_WIDTHS_DEVIATION in c.deviations for c in at_paper)
    assert not any(PAPER_WIDTHS_DEVIATION in c.deviations for c in scale_claims(TINY, Setting(TINY, paper.files)))
    assert all("128" in c.deviations[-1] for c in at_paper if c.deviations[-1].startswith("Training"))  # 5.1's batch


def test_the_paper_is_set_beside_our_test_split_arm_by_arm_with_the_difference():
    from damcha.evidence.view import paper_beside

    claim = {"metric": "val_bits_per_char", "columns": ["val_nll", "test_bits_per_char"],
             "summary": [{"arm": "damcha", "paper": 1.486}, {"arm": "mha", "paper": 1.5437},
                         {"arm": "MHA at DAMCHA's parameters", "paper": None}],
             "details": [{"arm": "damcha", "metric": "test_bits_per_char", "mean": 1.5, "low": 1.4, "high": 1.6},
                         {"arm": "damcha", "metric": "val_bits_per_char", "mean": 9.0, "low": 8.0, "high": 10.0},
                         {"arm": "mha", "metric": "test_bits_per_char", "mean": 1.6, "low": 1.55, "high": 1.65},
                         {"arm": "MHA at DAMCHA's parameters", "metric": "test_bits_per_char", "mean": 1.7,
                          "low": 1.6, "high": 1.8}]}
    rows = paper_beside(claim)
    assert [r["arm"] for r in rows] == ["damcha", "mha"]  # the arms the paper gives a number for
    assert rows[0]["paper (bits per char)"] == "1.486"
    assert rows[0]["ours, test split [95% interval]"] == "1.5 [1.4, 1.6]"  # the test split, never validation
    assert rows[0]["ours − paper"] == f"{1.5 - 1.486:+.4g} ({100 * (1.5 - 1.486) / 1.486:+.1f}%)"
    assert rows[1]["ours − paper"].startswith(f"{1.6 - 1.5437:+.4g}")
    assert paper_beside({**claim, "columns": ["val_nll"]}) == []  # no test split (the demo): nothing set beside


@pytest.mark.slow  # matches widths at the paper's sizes: 25 s (the slow tier runs it)
def test_table_3_sweeps_the_papers_depths_of_f_at_the_scales_widths_against_a_matched_shallow_f():
    """At the paper's size: f of 1, 3, 5, 7 and 9 linear layers as the paper counts them (hidden layers and the output
    projection; the scale's first width, then its last), the deepest (Section 5.1's f) the reference, and f of two
    layers (one hidden layer) widened to the deepest f's parameters, counted."""
    from damcha.evidence.capacity import base_config
    from damcha.evidence.costs import generated_setting, scale_claims_chosen

    with generated_setting(PAPER) as setting:
        (table3,) = scale_claims_chosen(setting, ["table3_depth"])
    widths = {a.name: dict(a.overrides)["generator_widths"] for a in table3.arms}
    assert [widths[f"f depth {k}"] for k in (1, 3, 5, 9)] == [(), (256, 512), (256, 512, 512, 512),
                                                              PAPER_GENERATOR_WIDTHS]
    assert PAPER_GENERATOR_WIDTHS == (256,) + (512,) * 7  # 8 hidden widths: 9 layers
    assert table3.reference == "f depth 9" and table3.matched_arms == ("f depth 2 at depth 9's parameters",)

    def count(w):
        return base_config("damcha", (*PAPER.model.items(), ("generator_widths", w))).parameter_estimate()

    matched, target = widths["f depth 2 at depth 9's parameters"], count(widths["f depth 9"])
    assert matched[0] % 8 == 0 and all(abs(count(matched) - target) <= abs(count((w,)) - target)
                                       for w in range(8, 2048, 8))  # the nearest one-layer f
    assert table3.seeds(3, quick=False) == 5 and "FID@Top-50" in table3.deviations[0]
    assert PAPER_WIDTHS_DEVIATION in table3.deviations  # the widths are ours, declared


def test_the_capacity_matched_arm_is_matched_again_at_the_scale(tiny):
    table4 = next(c for c in scale_claims(TINY, tiny) if c.key == "table4_ablations@cifar10-pixels")
    matched = next(a for a in table4.arms if a.name.startswith("MHA at"))
    params = model_parameters(matched.variant, "cifar10-pixels", matched.overrides, tiny)
    target = model_parameters("damcha", "cifar10-pixels", TINY.model_overrides("cifar10-pixels"), tiny)
    narrower = model_parameters("mha", "cifar10-pixels", (*matched.overrides, ("n_embd", dict(matched.overrides)["n_embd"] - 4)), tiny)
    assert abs(params - target) <= abs(narrower - target) and abs(params - target) / target < 0.05


def test_every_missing_file_is_named_at_once_before_anything_trains(tmp_path):
    (tmp_path / "text8").write_bytes(b"a b " * 100)
    with pytest.raises(DataError, match=r"lacks what --scale paper reads: cifar10-pixels \(cifar-10-batches-py\), "
                                        r"enwik8 \(enwik8 or enwik8\.zip\)"):
        locate_data(PAPER, tmp_path)
    with pytest.raises(DataError, match="needs --data-dir"):
        locate_data(PAPER, None)
    assert locate_data(PAPER, tmp_path, ["table5_text@text8"]) == (("text8", str(tmp_path / "text8")),)


def test_copies_that_are_not_the_published_files_are_refused_at_paper_scale(data_dir, tmp_path, capsys):
    with pytest.raises(DataError) as refused:
        check_data(Setting(PAPER, locate_data(PAPER, data_dir)))
    said = str(refused.value)
    assert "nothing was trained" in said and "not the published cifar10 data_batch_1" in said
    assert "not the published enwik8" in said and "not the published text8" in said  # every file, at once
    # the advice is the evidence's own: it has no --nonstandard-data (that is damcha train's flag)
    assert "--nonstandard-data" not in said and said.count("--scale tiny rehearses the code path") == 3, said
    out = tmp_path / "out"
    code = main(["evidence", "--scale", "paper", "--data-dir", str(data_dir), "--out", str(out), "--device", "cpu"])
    assert code == 2 and "not the published" in capsys.readouterr().err  # (on the CPU: the device is here)
    assert not (out / "work" / "runs").exists()


def test_too_little_data_for_a_batch_is_refused(tmp_path):
    write_standard_format_files(tmp_path, images_per_batch=2, corpus_bytes=3_000)
    with pytest.raises(DataError, match=r"cifar10-pixels: \d+ training samples are fewer than one batch of 16"):
        check_data(Setting(TINY, locate_data(TINY, tmp_path)))


def test_the_paper_scale_sizes_its_models_as_the_paper_does():
    """Section 5.1: 10 layers, 8 heads, width 512 (head width 64), f of 9 layers, batches of 128."""
    assert PAPER.model_overrides("enwik8") == (("n_layer", 10), ("n_head", 8), ("n_embd", 512),
                                               ("generator_widths", PAPER_GENERATOR_WIDTHS), ("block_size", 1024))
    assert {PAPER.place(d).train["batch_size"] for d in ("enwik8", "text8", "cifar10-pixels")} == {128}
    assert set(SCALES) >= {"tiny", "paper"}


def test_the_page_shows_a_scales_results_beside_the_demos(tmp_path, monkeypatch):
    """A results folder of `--scale tiny` beside the demo's: a column of the summary, a section under the
    claim it covers, greyed as a rehearsal; a scale folder that cannot be read is named, the rest shown."""
    import shutil

    from streamlit.testing.v1 import AppTest

    shipped = ROOT / "checkpoints" / "evidence"
    demo = tmp_path / "evidence"
    shutil.copytree(shipped, demo)
    doc = json.loads((shipped / "results.json").read_text())
    table5 = next(c for c in doc["claims"] if c["key"] == "table5_text")
    tested = [{**d, "metric": "test_bits_per_char", "mean": d["mean"] + 0.5} for d in table5["details"]
              if d["metric"] == "val_bits_per_char"]  # a scale's record: its test split beside validation
    at_scale = {**table5, "key": "table5_text@enwik8", "title": table5["title"] + " — on enwik8",
                "columns": [*table5["columns"], "test_bits_per_char"], "details": [*table5["details"], *tested],
                "deviations": ["Unit: read as nats."]}
    (tmp_path / "evidence-tiny").mkdir()
    (tmp_path / "evidence-tiny" / "results.json").write_text(json.dumps({**doc, "scale": "tiny", "claims": [at_scale]}))
    (tmp_path / "evidence-paper").mkdir()
    (tmp_path / "evidence-paper" / "results.json").write_text("{not json")
    monkeypatch.setenv("DAMCHA_EVIDENCE", str(demo))
    at = AppTest.from_file(str(ROOT / "app" / "streamlit_app.py"), default_timeout=120)
    at.switch_page("../pages/evidence.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("results at the paper scale cannot be shown" in w.value for w in at.warning)
    summary = at.dataframe[0].value
    column = dict(zip(summary["claim"], summary["tiny scale"], strict=True))
    assert column[table5["title"]].startswith("enwik8: ") and column[table5["title"]].endswith("(rehearsal)")
    assert sum(v == "not run" for v in column.values()) == len(doc["claims"]) - 1
    at.selectbox(key="claim").set_value(table5["title"]).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at_scale["title"] + ", at the tiny scale (a rehearsal of the code path: not evidence)" in \
        [s.value for s in at.subheader]
    assert any(":gray-badge[" in m.value and "(rehearsal)" in m.value for m in at.markdown)
    beside = next(d.value for d in at.dataframe if "ours − paper" in d.value.columns)  # the paper beside our test split
    damcha = next(d for d in tested if d["arm"] == "damcha")
    row = beside[beside["arm"] == "damcha"].iloc[0]
    assert row["ours, test split [95% interval]"].startswith(f"{damcha['mean']:.4g} [")
    assert row["paper (bits per char)"] == f"{next(r['paper'] for r in table5['summary'] if r['arm'] == 'damcha'):.4g}"
    assert any(c.value.startswith("Where the paper is silent or this differs from it: Unit: read as nats.")
               for c in at.caption)


def test_a_claim_without_a_configuration_at_the_scale_is_refused_in_words_before_any_file_is_read(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["evidence", "--scale", "paper", "--data-dir", str(tmp_path / "absent"), "--out", str(out),
                 "--only", "table6_classification", "table5_text@enwik8", "tableX"])
    said = capsys.readouterr().err
    assert code == 2 and "table6_classification has no configuration at --scale paper" in said
    assert "tableX: no such claim" in said
    assert "--scale paper runs table1_images, table2_efficiency, table3_depth, table4_ablations, table5_text" in said
    assert not out.exists()


def test_the_shipped_rehearsal_shows_beside_the_demo_evidence_as_a_rehearsal_on_generated_files():
    """checkpoints/evidence-tiny: `python -m damcha standard-files --out DATA` and `python -m damcha evidence --scale
    tiny --data-dir DATA --out checkpoints/evidence-tiny` (docs/reproduce.md)."""
    from damcha.evidence.view import results_at_other_scales, scale_data_words

    found = {name: (doc, problem) for name, doc, problem in results_at_other_scales(ROOT / "checkpoints" / "evidence")}
    doc, problem = found["tiny"]
    assert not problem and doc["scale"] == "tiny" and "standard-files" not in doc["command"]
    assert scale_data_words(doc) == (", on files that are not the published data sets (cifar10-pixels, enwik8, text8: the "
                                     "standard formats, other content)")
    assert {c["key"] for c in doc["claims"]} >= {"table5_text@enwik8", "table5_text@text8", "table1_images@cifar10-pixels"}


@pytest.mark.parametrize(("words", "said"), [
    (["--seeds", "0"], "--seeds 0: every arm needs at least one seed"),
    (["--workers", "0"], "--workers 0: the units need at least one worker process"),
    (["--scale", "tiny", "--slurm-partition", "gpu"], "--slurm-partition only apply with --launcher slurm"),
])
def test_evidence_options_that_cannot_run_are_refused_before_any_data_is_read(words, said, tmp_path, capsys):
    """--seeds 0 fell back to the default and --workers 0 was accepted; Slurm flags without the Slurm launcher
    were refused only after every data file had been read (here: none is given, and the refusal is the flag's)."""
    code = main(["evidence", *words, "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")])
    err = capsys.readouterr().err
    assert code == 2 and said in err and "--data-dir" not in err, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()
