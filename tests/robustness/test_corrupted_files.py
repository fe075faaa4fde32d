"""A generated battery of corrupted run folders and reference checkpoints: every case ends in the
project's own error naming the file (and the field, where one is to blame), or in a run that works;
never another exception, a hang, or a file left behind.

The cases are generated from what the files hold, not listed by hand: every field of ModelConfig
and every entry of the shipped config and metrics gets every wrong value, every file every
truncation and every wrong file type, so a new field is covered without editing this file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import struct
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from damcha.inputs.model_inputs import validation_arrays
from damcha.inputs.uploads import InputError
from damcha.model.config import ModelConfig
from damcha.runs.checkpoints import CheckpointError, load_model, load_run
from damcha.runs.disk_cache import SHIPPED_FOLDER
from damcha.runs.reference import ReferenceCheckpointError, import_reference

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "checkpoints" / "digits-mha"
SNAPSHOT = "epoch_0040.safetensors"
FILES = ("config.json", "metrics.jsonl", SNAPSHOT)
NAN = object()  # written as the JSON literal NaN
WRONG_VALUES = (None, "text", 1.5, -1, 0, 10**12, 2**70, [], [1, 2], {}, {"a": 1}, True, NAN, "x" * 5000)
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0  # root reads mode-000 files: that case cannot fail there
CASE_SECONDS = 30  # a case still running after this is a hang


@contextmanager
def deadline(seconds: int, what: str) -> Iterator[None]:
    def hang(*_):
        raise AssertionError(f"{what}: still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def dumps(value) -> str:
    return json.dumps(value, default=lambda v: "__NAN__").replace('"__NAN__"', "NaN")


def replace_file(path: Path, data: bytes | str) -> None:
    """Write a new file in place of `path` (never through a hard link into the pristine copy)."""
    if path.is_symlink() or path.exists():
        path.unlink()
    path.write_bytes(data.encode() if isinstance(data, str) else data)


# ----------------------------------------------------------------------------- cases: (name, file, field, mutate)

Case = tuple[str, str, str | None, Callable[[Path, Path], None]]


def config_cases() -> Iterator[Case]:
    shipped = json.loads((SHIPPED / "config.json").read_text())
    model_fields = {f.name for f in dataclasses.fields(ModelConfig)} | set(shipped["model"])
    entries = [("model", k) for k in sorted(model_fields)]
    entries += [(section, k) for section in ("train", "data") for k in sorted(shipped[section])]
    for section, key in entries:
        for value in WRONG_VALUES:
            def mutate(run, _root, section=section, key=key, value=value):
                cfg = json.loads((run / "config.json").read_text())
                cfg[section][key] = value
                replace_file(run / "config.json", dumps(cfg))
            yield f"config {section}.{key} = {str(value)[:20] if value is not NAN else 'NaN'}", "config.json", key, mutate
    for key in ("model", "train", "data", "notes", "format_version"):
        for value in WRONG_VALUES:
            def mutate(run, _root, key=key, value=value):
                cfg = json.loads((run / "config.json").read_text())
                cfg[key] = value
                replace_file(run / "config.json", dumps(cfg))
            yield f"config {key} = {str(value)[:20] if value is not NAN else 'NaN'}", "config.json", None, mutate
    for top in ([], "text", 3, None):
        yield f"config is {top!r}", "config.json", None, lambda run, _r, top=top: replace_file(run / "config.json", dumps(top))


def metrics_cases() -> Iterator[Case]:
    first = json.loads((SHIPPED / "metrics.jsonl").read_text().splitlines()[0])
    for key in sorted(first):
        for value in WRONG_VALUES:
            if key != "epoch" and (value is None or value is NAN or isinstance(value, int | float)):
                continue  # any number (NaN: a diverged epoch) or null is a value a metric may have

            def mutate(run, _root, key=key, value=value):
                rows = (run / "metrics.jsonl").read_text().splitlines()
                row = json.loads(rows[-1])
                row[key] = value
                replace_file(run / "metrics.jsonl", "\n".join([*rows[:-1], dumps(row)]) + "\n")
            yield f"metrics {key} = {str(value)[:20]}", "metrics.jsonl", None, mutate
    for row in ("[1, 2]", '"text"', "3", "null", "{not json", "[" * 5000 + "]" * 5000, '{"epoch": 1, "a": ' * 2000 + "1" + "}" * 2000):
        yield (f"metrics row {row[:12]}", "metrics.jsonl", None,
               lambda run, _r, row=row: replace_file(run / "metrics.jsonl", (SHIPPED / "metrics.jsonl").read_text() + row + "\n"))
    yield "metrics binary", "metrics.jsonl", None, lambda run, _r: replace_file(run / "metrics.jsonl", bytes(range(256)) * 40)


def header_of(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def with_header(header: dict | str, body: bytes) -> bytes:
    text = (header if isinstance(header, str) else json.dumps(header)).encode()
    return struct.pack("<Q", len(text)) + text + body


def snapshot_cases() -> Iterator[Case]:
    header, _ = header_of(SHIPPED / SNAPSHOT)
    first = next(k for k in sorted(header) if k != "__metadata__")
    for field in ("dtype", "shape", "data_offsets"):
        for value in (*WRONG_VALUES, ["0", "1"], [-1, 5], [10**20, 10**20 + 4], "I64", [1, 2, 3, 4, 5]):
            def mutate(run, _root, field=field, value=value):
                h, body = header_of(run / SNAPSHOT)
                h[first][field] = value
                replace_file(run / SNAPSHOT, with_header(dumps(h), body))
            yield f"snapshot {field} = {str(value)[:20]}", SNAPSHOT, None, mutate
        yield (f"snapshot without {field}", SNAPSHOT, None,
               lambda run, _r, field=field: replace_file(run / SNAPSHOT, with_header(
                   {**header_of(run / SNAPSHOT)[0], first: {k: v for k, v in header[first].items() if k != field}},
                   header_of(run / SNAPSHOT)[1])))
    for meta in (["x"], "x", 5, {"format_version": 5}, {"format_version": "99"}, {"a": {"b": 1}}):
        yield (f"snapshot metadata {str(meta)[:20]}", SNAPSHOT, None,
               lambda run, _r, meta=meta: replace_file(run / SNAPSHOT, with_header(
                   {**header_of(run / SNAPSHOT)[0], "__metadata__": meta}, header_of(run / SNAPSHOT)[1])))
    deep = '{"a":' * 200_000 + "1" + "}" * 200_000  # a 1.2 MB nested header
    yield "snapshot nested header", SNAPSHOT, None, lambda run, _r: replace_file(run / SNAPSHOT, with_header(deep, b""))
    yield ("snapshot header length past the file", SNAPSHOT, None,
           lambda run, _r: replace_file(run / SNAPSHOT, struct.pack("<Q", 2**62) + b"{}"))
    yield ("snapshot extra tensor", SNAPSHOT, None, lambda run, _r: replace_file(run / SNAPSHOT, with_header(
        {**header_of(run / SNAPSHOT)[0], "extra": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}},
        header_of(run / SNAPSHOT)[1])))


def truncation_cases() -> Iterator[Case]:
    for name in FILES:
        size = (SHIPPED / name).stat().st_size
        for cut in sorted({0, 1, 7, 8, 9, 100, size // 2, size - 1}):
            yield (f"{name} cut at {cut}", name, None,
                   lambda run, _r, name=name, cut=cut: replace_file(run / name, (SHIPPED / name).read_bytes()[:cut]))


def file_type_cases() -> Iterator[Case]:
    for name in FILES:
        def folder(run, _r, name=name):
            (run / name).unlink()
            (run / name).mkdir()

        def fifo(run, _r, name=name):
            (run / name).unlink()
            os.mkfifo(run / name)

        def loop(run, _r, name=name):
            (run / name).unlink()
            os.symlink(name, run / name)

        def outside(run, root, name=name):
            elsewhere = root.parent / f"outside-{name}"
            if not elsewhere.exists():
                shutil.copy(SHIPPED / name, elsewhere)
            (run / name).unlink()
            os.symlink(elsewhere, run / name)

        def device(run, _r, name=name):
            (run / name).unlink()
            os.symlink("/dev/zero", run / name)

        def dangling(run, _r, name=name):
            (run / name).unlink()
            os.symlink("gone", run / name)

        def unreadable(run, _r, name=name):
            replace_file(run / name, (SHIPPED / name).read_bytes())
            os.chmod(run / name, 0)

        for kind, mutate in (("a folder", folder), ("a FIFO", fifo), ("a symlink loop", loop),
                             ("a symlink out of the root", outside), ("a link to /dev/zero", device),
                             ("a dangling symlink", dangling), ("mode 000", unreadable)):
            if kind == "mode 000" and AS_ROOT:
                continue
            yield f"{name} is {kind}", name, None, mutate


def all_run_cases() -> list[Case]:
    return [*config_cases(), *metrics_cases(), *snapshot_cases(), *truncation_cases(), *file_type_cases()]


# ----------------------------------------------------------------------------- the battery

def outcome(run_dir: Path, root: Path, name: str, file: str, field: str | None) -> str:
    """'refused' or 'works' (or 'epoch left out'); fails the test on anything else."""
    try:
        run = load_run(run_dir, root)
    except CheckpointError as e:
        message = str(e)
        assert "Traceback" not in message
        assert file in message or str(run_dir) in message, f"{name}: the message names no file: {message}"
        if field is not None and file == "config.json" and "config.json" in message:
            assert field in message or "config" in message, f"{name}: {message}"
        return "refused"
    left_out = [e for e, _ in run.bad_snapshots]
    for epoch, why in run.bad_snapshots:
        assert snapshot_name_of(epoch) in why, f"{name}: {why}"
    for epoch in run.epochs:
        try:
            model = load_model(run, epoch)
            assert all(torch.isfinite(p).all() for p in model.parameters())
        except CheckpointError as e:
            assert snapshot_name_of(epoch) in str(e), f"{name}: {e}"
    try:
        validation_arrays(run)
    except (CheckpointError, InputError):
        pass
    return "epoch left out" if left_out else "works"


def snapshot_name_of(epoch: int) -> str:
    return f"epoch_{epoch:04d}.safetensors"


def test_every_generated_corruption_of_a_run_folder_is_handled(tmp_path, capsys):
    root = tmp_path / "root"
    root.mkdir()
    pristine = tmp_path / "pristine"
    # The run's files; its shipped tables (derived/, a folder that cannot be hard-linked) are read only
    # through the cache and have their own broken-entry tests (tests/unit/test_shipped_tables.py).
    shutil.copytree(SHIPPED, pristine, ignore=shutil.ignore_patterns(SHIPPED_FOLDER))
    cases = all_run_cases()
    tally: dict[str, int] = {}
    for i, (name, file, field, mutate) in enumerate(cases):
        run = root / f"case{i}"
        run.mkdir()
        for f in pristine.iterdir():
            os.link(f, run / f.name)  # mutations replace files, never write through the link
        mutate(run, root)
        with deadline(CASE_SECONDS, name):
            result = outcome(run, root, name, file, field)
        tally[result] = tally.get(result, 0) + 1
        shutil.rmtree(run, ignore_errors=True)
    assert pristine.joinpath(SNAPSHOT).read_bytes() == (SHIPPED / SNAPSHOT).read_bytes()
    assert tally.get("refused", 0) > len(cases) // 2, tally  # the battery does reach the checks
    with capsys.disabled():
        print(f"\ncorrupted run folders: {len(cases)} cases tried, all handled ({tally})")


def test_the_battery_grows_with_the_config(monkeypatch):
    """A field added to ModelConfig is in the battery without editing it."""
    before = {name for name, *_ in config_cases()}

    @dataclasses.dataclass(frozen=True)
    class Wider(ModelConfig):
        brand_new_setting: int = 0

    monkeypatch.setattr(sys.modules[__name__], "ModelConfig", Wider)
    after = {name for name, *_ in config_cases()}
    assert {n for n in after - before if "brand_new_setting" in n}


def test_a_new_config_field_type_unknown_to_the_checks_fails_loudly():
    @dataclasses.dataclass(frozen=True)
    class Odd(ModelConfig):
        odd: complex = 0j

    with pytest.raises(TypeError, match="does not know how to check"):
        Odd()


# ----------------------------------------------------------------------------- reference checkpoints

D, H, V = 16, 4, 11


def authors_checkpoint(**config) -> dict:
    """A tiny checkpoint laid out as the reference code saves one (decoder keys, masks, components)."""
    g = torch.Generator().manual_seed(0)
    r = lambda *shape: torch.randn(*shape, generator=g) * 0.1
    d = D // H
    diag = torch.block_diag(*[torch.ones(d, d)] * H)
    state = {"decoder.shared_mlp_module.mlp.0.weight": r(8, D), "decoder.shared_mlp_module.mlp.0.bias": r(8),
             "decoder.shared_mlp_module.mlp.3.weight": r(D * D, 8), "decoder.shared_mlp_module.mlp.3.bias": r(D * D),
             "decoder.shared_mlp_module.diag_mask": diag, "decoder.shared_mlp_module.off_diag_mask": 1 - diag}
    for name, shape in (("self_attn.W_v", (D, D)), ("self_attn.out_proj", (D, D)), ("ff.net.0", (2 * D, D)),
                        ("ff.net.3", (D, 2 * D))):
        state[f"decoder.layers.0.{name}.weight"], state[f"decoder.layers.0.{name}.bias"] = r(*shape), r(shape[0])
    for ln in ("ln1", "ln2"):
        state[f"decoder.layers.0.{ln}.weight"], state[f"decoder.layers.0.{ln}.bias"] = torch.ones(D), torch.zeros(D)
    return {"format_version": 2, "epoch": 3, "loss": 1.5, "model_state_dict": state,
            "components": {"embedding": {"weight": r(V, D)}, "head": {"proj.weight": r(V, D), "proj.bias": r(V)}},
            "config": {"n_heads": H, "diag_scale": 1.0, **config}, "off_diag_params": {"off_diag_scale": 1.0}}


def reference_cases(tmp: Path) -> Iterator[tuple[str, Path, str | None]]:
    """(case, file, the setting the message must name)."""
    n = iter(range(10**6))

    def saved(ckpt: dict) -> Path:
        path = tmp / f"ref{next(n)}" / "checkpoint_epoch_3.pt"
        path.parent.mkdir()
        torch.save(ckpt, path)
        return path

    from damcha.runs.reference import SAVED_SETTINGS

    wrong_for = {"count": ("text", 1.5, -1, 0, 10**12, [], [4], {}, True, float("nan"), float("inf")),
                 "number": ("text", [], [1.0], {}, True, float("nan"), float("inf"), -float("inf")),
                 "text": (1, [], {}, True, 2.5)}
    for key, kind in SAVED_SETTINGS.items():
        for value in wrong_for[kind]:
            for section in ("config", "off_diag_params"):
                ckpt = authors_checkpoint()
                ckpt[section][key] = value
                yield f"{section}.{key} = {str(value)[:20]}", saved(ckpt), key
    for section in ("config", "off_diag_params", "components", "model_state_dict"):
        for value in ([1], "text", 3):
            ckpt = authors_checkpoint()
            ckpt[section] = value
            yield f"{section} is {value!r}", saved(ckpt), None
    for epoch in (-5, 10**30, "3", 2.5):
        ckpt = authors_checkpoint()
        ckpt["epoch"] = epoch
        path = saved(ckpt)
        plain = path.with_name("best_model.pt")  # the epoch is read from the file, not its name
        path.rename(plain)
        yield f"epoch {epoch!r}", plain, "epoch"
    huge = tmp / "huge-name"
    huge.mkdir()
    torch.save(authors_checkpoint(), huge / f"checkpoint_epoch_{10**30}.pt")
    yield "epoch 10**30 in the file name", huge / f"checkpoint_epoch_{10**30}.pt", "epoch"
    ckpt = authors_checkpoint()
    ckpt["model_state_dict"]["decoder.layers.0.self_attn.W_v.weight"][0, 0] = float("nan")
    yield "NaN weight", saved(ckpt), "W_v"
    ckpt = authors_checkpoint()
    ckpt["model_state_dict"]["decoder.layers.0.ff.net.0.weight"] = torch.zeros(3, 3)
    yield "wrong shape", saved(ckpt), "ff.net.0"
    good = saved(authors_checkpoint())
    for cut in (0, 4, 100, good.stat().st_size // 2):
        path = saved(authors_checkpoint())
        path.write_bytes(good.read_bytes()[:cut])
        yield f"cut at {cut}", path, None
    path = saved(authors_checkpoint())
    path.unlink()
    os.mkfifo(path)
    yield "a FIFO", path, None


def test_every_generated_corruption_of_a_reference_checkpoint_is_refused_by_name(tmp_path, monkeypatch, capsys):
    temp = tmp_path / "system-temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    (tmp_path / "cases").mkdir()
    cases = list(reference_cases(tmp_path / "cases"))
    for i, (name, path, setting) in enumerate(cases):
        out = tmp_path / "out" / f"run{i}"
        with deadline(CASE_SECONDS, name), pytest.raises(ReferenceCheckpointError) as refused:
            import_reference(path, out)
        message = str(refused.value)
        assert str(path) in message, f"{name}: names no file: {message}"
        if setting is not None:
            assert setting in message, f"{name}: names no setting: {message}"
        assert "weights_only=False" not in message and "weights_only set to False" not in message
        assert not out.exists(), f"{name}: a refused import wrote {out}"
        assert not any((tmp_path / "out").glob(".*")), f"{name}: a staging folder was left"
    assert not list(temp.iterdir()), "left in the temporary directory"
    with capsys.disabled():
        print(f"\ncorrupted reference checkpoints: {len(cases)} cases tried, all refused by name")


def test_a_good_reference_import_leaves_only_its_run(tmp_path, monkeypatch):
    temp = tmp_path / "system-temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    (tmp_path / "src").mkdir()
    torch.save(authors_checkpoint(), tmp_path / "src" / "checkpoint_epoch_3.pt")
    out = import_reference(tmp_path / "src", tmp_path / "runs" / "converted")
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["converted"]
    assert load_run(out).epochs == (3,) and not list(temp.iterdir())
    with pytest.raises(ReferenceCheckpointError, match="already exists"):
        import_reference(tmp_path / "src", out)


def test_a_pickled_object_is_refused_without_advice_to_unpickle_it(tmp_path):
    path = tmp_path / "hostile.pt"
    torch.save({"model_state_dict": {"decoder.x": torch.zeros(1)}, "payload": ValueError("x")}, path)
    with pytest.raises(ReferenceCheckpointError) as refused:
        import_reference(path, tmp_path / "out")
    message = str(refused.value)
    assert "nothing was unpickled" in message and "ValueError" in message and "weights_only" not in message


def test_the_cli_refuses_a_bad_reference_in_one_line_with_exit_code_2(tmp_path, capsys):
    from damcha.__main__ import main

    ckpt = authors_checkpoint()
    ckpt["config"]["n_heads"] = [4]
    torch.save(ckpt, tmp_path / "bad.pt")
    assert main(["import-reference", str(tmp_path / "bad.pt"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "bad.pt" in err and "n_heads" in err and "Traceback" not in err


def test_the_cli_names_a_broken_run_in_one_line_with_exit_code_2(tmp_path, capsys):
    from damcha.__main__ import main

    run = tmp_path / "run"
    shutil.copytree(SHIPPED, run)
    (run / "config.json").write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    assert main(["figures", "--run", str(run), "--out", str(tmp_path / "figs")]) == 2
    err = capsys.readouterr().err.strip()
    assert "config.json" in err and "nested" in err and "Traceback" not in err


UNREADABLE_CHECK = """
import sys
from damcha.runs.checkpoints import CheckpointError, list_runs, load_run
try:
    load_run(sys.argv[1])
    print("loaded")
except CheckpointError as e:
    print("refused:", e)
runs, bad = list_runs(sys.argv[2])
print("listed:", sorted(r.name for r in runs), [why for _, why in bad])
"""


def test_unreadable_files_and_folders_are_named(tmp_path):
    """Mode 000 stops every user but root: as root, the check runs without the capabilities that
    let root read anything (util-linux's setpriv), so it is tested in CI too."""
    import subprocess

    root = tmp_path / "runs"
    for name in ("no-config-access", "healthy", "closed-folder"):
        shutil.copytree(SHIPPED, root / name)
    os.chmod(root / "no-config-access" / "config.json", 0)
    os.chmod(root / "closed-folder", 0)
    prefix = []
    if AS_ROOT:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without util-linux's setpriv: mode 000 cannot stop reading here")
        prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search"]
    command = [*prefix, sys.executable, "-c", UNREADABLE_CHECK, str(root / "no-config-access"), str(root)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    finally:
        os.chmod(root / "closed-folder", 0o755)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "refused:" in out and "config.json: cannot be read (Permission denied)" in out, out
    assert "listed: ['healthy']" in out, out
    assert "closed-folder: cannot be read (Permission denied)" in out, out
