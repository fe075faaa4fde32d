"""The hostile battery, generated: every case is a command a user or an attacker could run, each in a
fresh process under a memory limit and a time bound (tests/support/limited.py), the full-disk ones on
a real 2 MB tmpfs. Every case is held to the same checks: exit 2 with one `error:` line that names the
file and the field or the limit, no traceback, every folder the user owns byte-for-byte unchanged,
nothing left in caches or staging folders, and peak memory growth under 300 MB."""

from __future__ import annotations

import json
import math
import os
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.support.disks import fill
from tests.support.folders import folder_digest
from tests.support.hostile_files import cifar_with_a_bad_batch, zipped_corpus
from tests.support.limited import GROWTH_LIMIT_MB, HANG_SECONDS, run_limited

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "checkpoints"


@dataclass
class Case:
    argv: list[str]
    names: list[Path | str]  # what the message must name (the file; a str is matched as given)
    words: list[str]  # the field or the limit, in the message
    owned: list[Path] = field(default_factory=list)  # folders the user has: unchanged afterwards
    absent: list[Path] = field(default_factory=list)  # what a refusal must not create
    cache: Path | None = None  # DAMCHA_CACHE for the command: empty afterwards


def _run(tmp: Path, like: str = "digits-mha") -> Path:
    shutil.copytree(SHIPPED / like, tmp / like)
    return tmp / like


def _edited_config(tmp: Path, edit: Callable[[str], str]) -> Case:
    run = _run(tmp)
    (run / "config.json").write_text(edit((run / "config.json").read_text()))
    return _figures(run, tmp, "config.json")


def _figures(run: Path, tmp: Path, *words: str, extra: tuple[str, ...] = ("--val-index", "0")) -> Case:
    return Case(["figures", "--run", run, *extra, "--figures", "attention", "--formats", "csv", "--out",
                 tmp / "figures"], [run], list(words), owned=[run], absent=[tmp / "figures"])


def _model_field(name: str, value) -> Callable[[str], str]:
    def edit(text: str) -> str:
        config = json.loads(text)
        config["model"][name] = value
        return json.dumps(config)
    return edit


# --- 1. a folder the user has is never written into -------------------------------------------------

def export_into_the_run_itself(tmp: Path) -> Case:
    run = _run(tmp)
    return Case(["export-hf", run, "--out", run], [run], ["already exists and is not an empty folder"], owned=[run])


def export_into_another_run(tmp: Path) -> Case:
    run, other = _run(tmp), _run(tmp, "digits-damcha")
    return Case(["export-hf", run, "--out", other], [other], ["already exists"], owned=[run, other])


def export_into_a_folder_with_a_config(tmp: Path) -> Case:
    run, out = _run(tmp), tmp / "mine"
    out.mkdir()
    (out / "config.json").write_text('{"mine": true}')
    return Case(["export-hf", run, "--out", out], [out], ["already exists", "--out"], owned=[run, out])


def export_onto_a_file(tmp: Path) -> Case:
    run, out = _run(tmp), tmp / "notes" / "notes.txt"
    out.parent.mkdir()
    out.write_text("my notes")
    return Case(["export-hf", run, "--out", out], [out], ["already exists"], owned=[run, out.parent])


def import_into_a_folder_with_a_config(tmp: Path) -> Case:
    source, out = _reference(tmp, {}), tmp / "mine"
    out.mkdir()
    (out / "config.json").write_text('{"mine": true}')
    return Case(["import-reference", source, "--out", out], [out], ["already exists"], owned=[out])


# --- 4. reference pickles ------------------------------------------------------------------------------

def _reference(tmp: Path, extra: dict, state: dict | None = None) -> Path:
    path = tmp / "src" / "checkpoint_epoch_1.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model_state_dict": state or {"decoder.x": torch.zeros(4)}, **extra}, path)
    return path


def _laughs(levels: int, width: int = 10) -> list:
    """width**levels leaves in a few hundred bytes of pickle (shallow: the count, not the depth, catches it)."""
    value: list = [0]
    for _ in range(levels):
        value = [value] * width
    return value


def _import(tmp: Path, source: Path, *words: str) -> Case:
    return Case(["import-reference", source, "--out", tmp / "out"], [source], list(words), owned=[source.parent],
                absent=[tmp / "out"])


def a_billion_laughs_as_the_epoch(tmp: Path) -> Case:
    return _import(tmp, _reference(tmp, {"epoch": _laughs(12)}), "1,000,000")


def a_billion_laughs_in_the_config(tmp: Path) -> Case:
    return _import(tmp, _reference(tmp, {"config": {"n_heads": _laughs(12), "diag_scale": _laughs(12)}}),
                   "1,000,000")


def values_nested_200_deep(tmp: Path) -> Case:
    value: list = []
    for _ in range(200):
        value = [value]
    return _import(tmp, _reference(tmp, {"config": {"mlp_hidden": value}}), "deeper than 32")


def a_zero_stride_view_of_900_million_elements(tmp: Path) -> Case:
    return _import(tmp, _reference(tmp, {}, {"decoder.unknown": torch.zeros(1).expand(30000, 30000)}),
                   "900,000,000 elements", "storage of 1")


# --- 5. data readers -----------------------------------------------------------------------------------

def _train(tmp: Path, dataset: str, data: Path, *words: str, flags: tuple[str, ...] = ()) -> Case:
    return Case(["train", "--dataset", dataset, "--data-path", data, *flags, "--epochs", "1", "--out", tmp / "run"],
                [data], list(words), owned=[data if data.is_dir() else data.parent], absent=[tmp / "run"],
                cache=tmp / "cache")


def an_enwik8_zip_of_400_mb_of_zeros(tmp: Path) -> Case:
    return _train(tmp, "enwik8", zipped_corpus(tmp / "data" / "enwik8.zip", 400 * 2**20, bytes(2**20)),
                  "more than 20 to 1")


def an_enwik8_zip_of_another_size(tmp: Path) -> Case:
    letters = np.random.default_rng(0).choice(np.frombuffer(b"abcdefghij klmnop<>", dtype=np.uint8), 3_000_000)
    zipped = zipped_corpus(tmp / "data" / "enwik8.zip", 3_000_000, b"<mediawiki> " + letters.tobytes())
    return _train(tmp, "enwik8", zipped, "not the published enwik8", "refused before extraction")


def an_encrypted_enwik8_member(tmp: Path) -> Case:
    archive = tmp / "data" / "enwik8.zip"
    archive.parent.mkdir(parents=True)
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("enwik8", b"<mediawiki> " * 1000)
    data = bytearray(archive.read_bytes())
    for header, flags in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        data[data.find(header) + flags] |= 0x1
    archive.write_bytes(bytes(data))
    return _train(tmp, "enwik8", archive, "is encrypted", flags=("--nonstandard-data",))


def a_parquet_file_that_expands_a_thousandfold(tmp: Path) -> Case:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    bomb = tmp / "data" / "train.parquet"
    bomb.parent.mkdir(parents=True)
    pq.write_table(pa.table({"text": pa.array(["a" * 100_000] * 600)}), bomb, compression="zstd")
    return _train(tmp, "parquet-text", bomb, "more than 100 to 1")


def cifar_labels_an_integer(tmp: Path) -> Case:
    return _train(tmp, "cifar10", cifar_with_a_bad_batch(tmp, labels=7), "data_batch_2", "'labels' is int 7",
                  flags=("--nonstandard-data",))


def cifar_labels_strings(tmp: Path) -> Case:
    return _train(tmp, "cifar10", cifar_with_a_bad_batch(tmp, labels=["cat", "dog", "cat", "dog"]), "data_batch_2",
                  "not 4 whole class numbers", flags=("--nonstandard-data",))


def a_fifo_as_a_cifar_batch(tmp: Path) -> Case:
    return _train(tmp, "cifar10", cifar_with_a_bad_batch(tmp, fifo="data_batch_3"), "data_batch_3: a FIFO",
                  flags=("--nonstandard-data",))


# --- 6. Hugging Face and Trainer folders ---------------------------------------------------------------

def _hf_folder(tmp: Path, name: str = "hf") -> Path:
    hf = pytest.importorskip("damcha.hf", reason="the Hugging Face extra (installed by requirements.txt)")
    hf.export_run(SHIPPED / "digits-mha", tmp / name)
    return tmp / name


def a_trainer_state_of_11_million_empty_entries(tmp: Path) -> Case:
    checkpoint = _hf_folder(tmp / "trainer-run", "checkpoint-1")
    (checkpoint / "trainer_state.json").write_text('{"epoch": 1.0, "log_history": [' + "{}, " * 10_999_999 + "{}]}")
    case = _figures(tmp / "trainer-run", tmp, "11,000,001 objects")
    case.names = [checkpoint / "trainer_state.json"]
    return case


def a_sparse_weights_file_of_200_mb(tmp: Path) -> Case:
    folder = _hf_folder(tmp)
    with open(folder / "model.safetensors", "ab") as f:
        f.truncate(200_000_000)  # sparse: no disk, reads as 200 MB (hashed twice by the checks: kept small)
    return _figures(folder, tmp, "model.safetensors", "200,000,000 bytes")


def pickled_weights_only(tmp: Path) -> Case:
    folder = _hf_folder(tmp)
    from safetensors.torch import load_file
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    return _figures(folder, tmp, "pytorch_model.bin", "never loaded")


def lying_safetensors_offsets(tmp: Path) -> Case:
    folder = _hf_folder(tmp)
    data = bytearray((folder / "model.safetensors").read_bytes())
    length = int.from_bytes(data[:8], "little")
    header = data[8:8 + length].decode()
    digit = header.index(",", header.index("data_offsets")) + 1  # the first tensor's end offset
    data[8 + digit] = ord("1" if header[digit] == "9" else "9")
    (folder / "model.safetensors").write_bytes(bytes(data))
    return _figures(folder, tmp, "model.safetensors")


def nan_weights(tmp: Path) -> Case:
    folder = _hf_folder(tmp)
    from safetensors.torch import load_file, save_file
    tensors = load_file(folder / "model.safetensors")
    first = sorted(k for k, v in tensors.items() if v.is_floating_point())[0]
    tensors[first][..., 0] = math.nan
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    return _figures(folder, tmp, "model.safetensors", "NaN")


# --- 7. a text over the upload limit ---------------------------------------------------------------------

def a_text_of_5_1_mb(tmp: Path) -> Case:
    run = _run(tmp, "text-damcha")
    text = tmp / "huge.txt"
    text.write_bytes((b"The quick brown fox jumps over the lazy dog. " * 120_000)[:5_100_000])
    case = _figures(run, tmp, "5,100,000 bytes", "up to 5,000,000 bytes", extra=("--text", str(text)))
    case.names = [text]
    return case


# --- 8. values beyond Python's own limits -----------------------------------------------------------------

def a_5000_digit_integer_in_config(tmp: Path) -> Case:
    return _edited_config(tmp, lambda t: t.replace('"n_layer": 2', '"n_layer": ' + "9" * 5000))


def a_5000_digit_epoch_in_metrics(tmp: Path) -> Case:
    run = _run(tmp)
    (run / "metrics.jsonl").write_text('{"epoch": ' + "7" * 5000 + ', "val_nll": 1.0}\n')
    return _figures(run, tmp, "metrics.jsonl", "line 1", "5,000 digits")


def a_400_digit_loss_in_metrics(tmp: Path) -> Case:
    run = _run(tmp)
    (run / "metrics.jsonl").write_text('{"epoch": 40, "val_nll": ' + "7" * 400 + '}\n')
    return _figures(run, tmp, "metrics.jsonl", "400 digits")


def infinity_in_config(tmp: Path) -> Case:
    case = _edited_config(tmp, lambda t: t.replace('"dropout": 0.1', '"dropout": 1e999'))
    case.words.append("1e999 is not a usable number")
    return case


def attention_options_as_a_list(tmp: Path) -> Case:
    case = _edited_config(tmp, _model_field("attention_options", [1, 2]))
    case.words.append("attention_options must be an object of settings")
    return case


# --- cost tables: `damcha costs --table` writes only a cost table, and reads one as the run folder's files are read ---

def _costs_into(table: Path, *words: str) -> Case:
    return Case(["costs", "--scale", "tiny", "--only", "table5_text@text8", "--repeats", "1", "--table", table], [table],
                list(words), owned=[table.parent])


def costs_pointed_at_a_copy_of_the_evidence_results(tmp: Path) -> Case:
    (tmp / "mine").mkdir()
    shutil.copy(SHIPPED / "evidence" / "results.json", tmp / "mine" / "results.json")
    return _costs_into(tmp / "mine" / "results.json", "cannot be read as a cost table")


def costs_pointed_at_a_runs_config(tmp: Path) -> Case:
    return _costs_into(_run(tmp) / "config.json", "not a cost table")


def _table_file(tmp: Path, text: str) -> Path:
    (tmp / "tables").mkdir()
    (tmp / "tables" / "costs.json").write_text(text)
    return tmp / "tables" / "costs.json"


def a_cost_table_that_is_a_list(tmp: Path) -> Case:
    return _costs_into(_table_file(tmp, "[1, 2, 3]"), "not a cost table (a JSON list")


def a_cost_table_whose_devices_are_a_list(tmp: Path) -> Case:
    return _costs_into(_table_file(tmp, '{"devices": ["CPU"]}'), "not a cost table")


def a_cost_table_whose_rows_are_a_string(tmp: Path) -> Case:
    return _costs_into(_table_file(tmp, '{"devices": {"CPU": {"rows": "fast"}}}'), "devices['CPU']", "'rows' list")


def a_cost_table_row_with_a_string_batch(tmp: Path) -> Case:
    row = '{"config": {}, "batch": "64", "precision": "fp32", "compiled": false, "step_seconds": 1.0}'
    return _costs_into(_table_file(tmp, '{"devices": {"CPU": {"rows": [' + row + ']}}}'), "rows[0].batch", "not int")


def a_cost_table_nested_100000_deep(tmp: Path) -> Case:
    return _costs_into(_table_file(tmp, "[" * 100_000 + "]" * 100_000), "nested")


def a_cost_table_linked_to_dev_zero(tmp: Path) -> Case:
    (tmp / "tables").mkdir()
    (tmp / "tables" / "costs.json").symlink_to("/dev/zero")
    return _costs_into(tmp / "tables" / "costs.json", "not a regular file (a character device)")


def a_cost_table_that_is_a_fifo(tmp: Path) -> Case:
    (tmp / "tables").mkdir()
    os.mkfifo(tmp / "tables" / "costs.json")
    return _costs_into(tmp / "tables" / "costs.json", "not a regular file (a named pipe)")


# --- the evidence's own files: units.jsonl of a work folder, results.json for --reuse and --restate, a scale's data ---

def _units(tmp: Path, text: str | None = None) -> Case:
    """`damcha evidence` resuming from a work folder whose units.jsonl is `text` (None: already made)."""
    (tmp / "work").mkdir(exist_ok=True)
    if text is not None:
        (tmp / "work" / "units.jsonl").write_text(text)
    return Case(["evidence", "--quick", "--only", "table1_digits", "--out", tmp / "out", "--work", tmp / "work"],
                [tmp / "work" / "units.jsonl"], [], owned=[tmp / "work"], absent=[tmp / "out" / "results.json"])


def _with_words(case: Case, *words: str) -> Case:
    case.words.extend(words)
    return case


def a_unit_row_without_its_unit(tmp: Path) -> Case:
    return _with_words(_units(tmp, '{"value": {"val_loss": 1.0}, "seconds": 1.0}\n'), "line 1", "no 'unit'")


def a_unit_row_whose_unit_is_a_list(tmp: Path) -> Case:
    return _with_words(_units(tmp, '{"unit": ["a"], "value": {"val_loss": 1.0}}\n'), "line 1.unit", "a list")


def a_unit_row_whose_value_holds_text(tmp: Path) -> Case:
    return _with_words(_units(tmp, '{"unit": "a", "value": {"val_loss": 1.0}}\n{"unit": "b", "value": {"val_loss": '
                                   '"low"}}\n'), "line 2.value.val_loss", "text, not a number")


def a_unit_row_whose_seconds_are_an_object(tmp: Path) -> Case:
    return _with_words(_units(tmp, '{"unit": "a", "value": {"val_loss": 1.0}, "seconds": {}}\n'), "line 1.seconds",
                       "an object, not a number")


def units_nested_100000_deep(tmp: Path) -> Case:
    return _with_words(_units(tmp, "[" * 100_000 + "]" * 100_000 + "\n" + '{"unit": "a", "value": {}}\n'), "line 1",
                       "nested")


def units_linked_to_dev_zero(tmp: Path) -> Case:
    (tmp / "work").mkdir()
    (tmp / "work" / "units.jsonl").symlink_to("/dev/zero")
    return _with_words(_units(tmp), "not a regular file (a character device)")


def units_as_a_fifo(tmp: Path) -> Case:
    (tmp / "work").mkdir()
    os.mkfifo(tmp / "work" / "units.jsonl")
    return _with_words(_units(tmp), "not a regular file (a named pipe)")


def _reuse(tmp: Path, text: str | None = None, name: str = "results.json") -> Case:
    """`damcha evidence --reuse FILE`, FILE holding `text` (None: already made)."""
    (tmp / "earlier").mkdir(exist_ok=True)
    if text is not None:
        (tmp / "earlier" / name).write_text(text)
    return Case(["evidence", "--quick", "--only", "table1_digits", "--reuse", tmp / "earlier" / name, "--out",
                 tmp / "out", "--work", tmp / "work"], [tmp / "earlier" / name], [], owned=[tmp / "earlier"],
                absent=[tmp / "out" / "results.json", tmp / "work" / "units.jsonl"])


def reusing_results_whose_claims_are_text(tmp: Path) -> Case:
    return _with_words(_reuse(tmp, '{"claims": "all of them"}'), "not a results file", "'claims' list")


def reusing_results_whose_values_are_text(tmp: Path) -> Case:
    doc = json.loads((SHIPPED / "evidence" / "results.json").read_text())
    doc["claims"][0]["values"]["damcha"] = "good"
    return _with_words(_reuse(tmp, json.dumps(doc)), "claims[0].values.damcha", "text, not a list of seeds")


def reusing_results_with_a_tuning_rate_that_is_not_a_number(tmp: Path) -> Case:
    doc = json.loads((SHIPPED / "evidence" / "results.json").read_text())
    doc["tuning"][0]["losses"] = {"fast": [1.0]}
    return _with_words(_reuse(tmp, json.dumps(doc)), "tuning[0].losses", "'fast' is not a learning rate")


def reusing_results_linked_to_dev_zero(tmp: Path) -> Case:
    (tmp / "earlier").mkdir()
    (tmp / "earlier" / "results.json").symlink_to("/dev/zero")
    return _with_words(_reuse(tmp), "not a regular file (a character device)")


def reusing_results_that_are_a_fifo(tmp: Path) -> Case:
    (tmp / "earlier").mkdir()
    os.mkfifo(tmp / "earlier" / "results.json")
    return _with_words(_reuse(tmp), "not a regular file (a named pipe)")


def reusing_results_that_are_not_there(tmp: Path) -> Case:
    return _with_words(_reuse(tmp, name="missing.json"), "no such file")


def _restate(tmp: Path, text: str) -> Case:
    (tmp / "out").mkdir()
    (tmp / "out" / "results.json").write_text(text)
    return Case(["evidence", "--restate", "--out", tmp / "out"], [tmp / "out" / "results.json"], [], owned=[tmp / "out"])


def restating_results_nested_100000_deep(tmp: Path) -> Case:
    return _with_words(_restate(tmp, '{"claims": ' + "[" * 100_000 + "]" * 100_000 + "}"), "nested")


def restating_results_whose_seeds_hold_text(tmp: Path) -> Case:
    doc = json.loads((SHIPPED / "evidence" / "results.json").read_text())
    doc["claims"][1]["values"]["mha"][0] = {"val_loss": "low"}
    return _with_words(_restate(tmp, json.dumps(doc)), "claims[1].values.mha[0].val_loss", "text, not a number")


def a_text8_that_is_a_fifo(tmp: Path) -> Case:
    (tmp / "data").mkdir()
    os.mkfifo(tmp / "data" / "text8")
    return Case(["evidence", "--scale", "tiny", "--only", "table5_text@text8", "--data-dir", tmp / "data", "--out",
                 tmp / "out"], [tmp / "data" / "text8"], ["a FIFO, not"], owned=[tmp / "data"])


BATTERY = [export_into_the_run_itself, export_into_another_run, export_into_a_folder_with_a_config,
           export_onto_a_file, import_into_a_folder_with_a_config,
           a_billion_laughs_as_the_epoch, a_billion_laughs_in_the_config, values_nested_200_deep,
           a_zero_stride_view_of_900_million_elements, an_enwik8_zip_of_400_mb_of_zeros,
           an_enwik8_zip_of_another_size, an_encrypted_enwik8_member, a_parquet_file_that_expands_a_thousandfold,
           cifar_labels_an_integer, cifar_labels_strings, a_fifo_as_a_cifar_batch,
           a_trainer_state_of_11_million_empty_entries, a_sparse_weights_file_of_200_mb, pickled_weights_only,
           lying_safetensors_offsets, nan_weights, a_text_of_5_1_mb, a_5000_digit_integer_in_config,
           a_5000_digit_epoch_in_metrics, a_400_digit_loss_in_metrics, infinity_in_config,
           attention_options_as_a_list,
           costs_pointed_at_a_copy_of_the_evidence_results, costs_pointed_at_a_runs_config, a_cost_table_that_is_a_list,
           a_cost_table_whose_devices_are_a_list, a_cost_table_whose_rows_are_a_string,
           a_cost_table_row_with_a_string_batch, a_cost_table_nested_100000_deep, a_cost_table_linked_to_dev_zero,
           a_cost_table_that_is_a_fifo,
           a_unit_row_without_its_unit, a_unit_row_whose_unit_is_a_list, a_unit_row_whose_value_holds_text,
           a_unit_row_whose_seconds_are_an_object, units_nested_100000_deep, units_linked_to_dev_zero, units_as_a_fifo,
           reusing_results_whose_claims_are_text, reusing_results_whose_values_are_text,
           reusing_results_with_a_tuning_rate_that_is_not_a_number, reusing_results_linked_to_dev_zero,
           reusing_results_that_are_a_fifo, reusing_results_that_are_not_there, restating_results_nested_100000_deep,
           restating_results_whose_seeds_hold_text, a_text8_that_is_a_fifo]


# --- 2. a disk that fills: each writer on a real 2 MB tmpfs (tests/robustness/conftest.py) ----------------
# The disk holds `earlier`, a folder of the user's that must come through unchanged, and a filler that
# leaves the writer too little room.

def _earlier(disk: Path) -> Path:
    (disk / "earlier").mkdir()
    (disk / "earlier" / "config.json").write_text('{"kept": true}')
    return disk / "earlier"


def export_on_a_full_disk(disk: Path, tmp: Path) -> Case:
    fill(disk, 64 * 1024)  # the config fits, the weights (about 0.4 MB) do not
    return Case(["export-hf", _run(tmp), "--out", disk / "hf"], [disk / "hf"], ["no space left on the disk that holds"],
                owned=[disk / "earlier"], absent=[disk / "hf"])


def import_on_a_full_disk(disk: Path, tmp: Path) -> Case:
    from tests.support.reference_fake import save_like_them, their_model

    (tmp / "src").mkdir(parents=True)
    torch.manual_seed(0)
    save_like_them(their_model(), tmp / "src" / "checkpoint_epoch_3.pt")
    fill(disk, 16 * 1024)
    return Case(["import-reference", tmp / "src" / "checkpoint_epoch_3.pt", "--out", disk / "converted"],
                [disk / "converted"], ["no space left on the disk that holds"], owned=[disk / "earlier", tmp / "src"],
                absent=[disk / "converted"])


def training_on_a_disk_that_fills(disk: Path, tmp: Path) -> Case:
    fill(disk, 250 * 1024)  # the config, two snapshots and one resume state fit; the next rewrite does not
    return Case(["train", "--dataset", "digits", "--variant", "mha", "--epochs", "4", "--n-embd", "16", "--out",
                 disk / "run"], [disk / "run"], ["no space left on device"], owned=[disk / "earlier"])


def evidence_on_a_disk_that_fills(disk: Path, tmp: Path) -> Case:
    """Units taken over from the shipped results (nothing trains) until the work folder's disk fills."""
    (disk / "out").mkdir()
    (disk / "out" / "results.json").write_text('{"kept": true}')
    fill(disk, 96 * 1024)  # the shipped results' units take about 250 kB
    return Case(["evidence", "--reuse", SHIPPED / "evidence" / "results.json", "--out", disk / "out", "--work",
                 disk / "work"], [disk / "work" / "units.jsonl"], ["no space left on the disk that holds"],
                owned=[disk / "earlier", disk / "out"])


FULL_DISK = [export_on_a_full_disk, import_on_a_full_disk, training_on_a_disk_that_fills,
             evidence_on_a_disk_that_fills]


def _leftovers(folder: Path) -> list[str]:
    """Staging folders and temporary files a write leaves beside what it writes."""
    return [p.name for p in folder.rglob(".*") if p.name.endswith((".exporting", ".importing", ".tmp", ".partial"))]


@pytest.mark.parametrize("make", BATTERY, ids=[m.__name__ for m in BATTERY])
def test_a_hostile_case_is_refused_in_words_within_bounds_and_changes_nothing(tmp_path, make):
    _holds_to_the_checks(make(tmp_path), tmp_path)


@pytest.mark.parametrize("make", FULL_DISK, ids=[m.__name__ for m in FULL_DISK])
def test_a_writer_on_a_full_disk_says_so_within_bounds_and_keeps_the_earlier_state(small_disk, tmp_path, make):
    _earlier(small_disk)
    case = make(small_disk, tmp_path / "elsewhere")
    _holds_to_the_checks(case, small_disk)
    if make is training_on_a_disk_that_fills:  # the snapshots written before the disk filled all load
        from damcha.runs.checkpoints import load_model, load_run

        run = load_run(small_disk / "run")
        assert run.epochs and all(load_model(run, epoch) is not None for epoch in run.epochs)
    if make is evidence_on_a_disk_that_fills:  # whole lines kept; the same command resumes once there is room
        from damcha.__main__ import main

        lines = (small_disk / "work" / "units.jsonl").read_bytes().split(b"\n")
        assert lines[-1] == b"" and len(lines) > 2, "a torn line was left"
        (small_disk / "filler").unlink()
        assert main([str(a) for a in case.argv]) == 0
        assert len((small_disk / "work" / "units.jsonl").read_text().splitlines()) > len(lines) - 1


def _holds_to_the_checks(case: Case, tmp_path: Path) -> None:
    before = {folder: folder_digest(folder) for folder in case.owned}
    env = {"DAMCHA_CACHE": str(case.cache)} if case.cache else None
    done = run_limited(case.argv, env)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Exceeds the limit" not in done.stderr, done.stderr[-3000:]
    message = done.message
    assert message.startswith("error: "), done.stderr[-3000:]
    for name in case.names:
        assert str(name) in message, (name, message)
    for word in case.words:
        assert word in message, (word, message)
    assert {folder: folder_digest(folder) for folder in case.owned} == before, "something of the user's changed"
    assert not [p for p in case.absent if p.exists()], "a refused command left what it would have written"
    assert not _leftovers(tmp_path), _leftovers(tmp_path)
    if case.cache:
        assert not [p for p in case.cache.rglob("*") if p.is_file()], "the cache kept something of a refused file"
    assert done.growth_mb < GROWTH_LIMIT_MB, done
    assert done.seconds < HANG_SECONDS / 4, done


def test_the_limits_page_counts_the_battery_as_it_is():
    limits = (ROOT / "docs" / "limits.md").read_text()
    assert f"{len(BATTERY)} cases" in limits and f"{len(FULL_DISK)} writers on a full 2 MB tmpfs" in limits
