"""`export-hf --with-code`: a folder a colleague without this package loads with trust_remote_code=True
and gets the same logits. The colleague is a fresh virtual environment that sees the pinned
Transformers, PyTorch, safetensors and NumPy (links to this environment's packages), and neither
damcha nor the app's extras (Pillow, SciPy, Streamlit, Plotly): every variant is loaded there."""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest
import torch

hf = pytest.importorskip("damcha.hf", reason="the Hugging Face extra (installed by requirements.txt)")
import transformers  # noqa: E402

from damcha.__main__ import main  # noqa: E402
from damcha.hf import remote_code  # noqa: E402
from damcha.model.config import ModelConfig, variant_config  # noqa: E402
from damcha.model.mechanisms import variant_names  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LEFT_OUT = ("damcha", "__editable__", "_damcha", "PIL", "pillow", "scipy", "streamlit", "plotly")


@pytest.fixture(scope="module")
def colleague(tmp_path_factory) -> Path:
    """The python of a fresh venv that has the Hugging Face stack and not this package."""
    where = tmp_path_factory.mktemp("colleague")
    venv.create(where / "venv", with_pip=False)
    python = where / "venv" / "bin" / "python"
    theirs = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip())
    ours = Path(sysconfig.get_paths()["purelib"])
    for entry in ours.iterdir():
        if not entry.name.lower().startswith(tuple(n.lower() for n in LEFT_OUT)) and not entry.name.endswith(".pth"):
            (theirs / entry.name).symlink_to(entry)
    probe = subprocess.run([python, "-c", "import importlib.util as u; print([m for m in ('damcha', 'PIL', 'scipy', "
                            "'streamlit', 'plotly') if u.find_spec(m)], u.find_spec('transformers') is not None)"],
                           capture_output=True, text=True, cwd=where, check=True)
    assert probe.stdout.split("]")[0] == "[" and probe.stdout.strip().endswith("True"), probe.stdout
    return python


LOAD = r"""
import json, sys, torch, transformers
folders, tokens = json.loads(sys.argv[1]), torch.tensor(json.loads(sys.argv[2]))
out = {}
for name, folder in folders.items():
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
    with torch.no_grad():
        out[name] = [type(model).__module__, model(tokens).logits.tolist()]
print(json.dumps(out))
"""


def _in_colleague(python: Path, folders: dict[str, Path], tokens: torch.Tensor, cwd: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["HF_MODULES_CACHE"] = str(cwd / "hf-modules")
    done = subprocess.run([python, "-c", LOAD, json.dumps({k: str(v) for k, v in folders.items()}),
                           json.dumps(tokens.tolist())], capture_output=True, text=True, timeout=600, cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_variant_saved_with_its_code_loads_without_the_package_to_the_same_logits(colleague, tmp_path):
    tokens = torch.randint(0, 11, (2, 12), generator=torch.Generator().manual_seed(0))  # (B, T)
    folders, expected = {}, {}
    for variant in variant_names():
        torch.manual_seed(0)
        config = hf.DamchaConfig.from_model_config(variant_config(ModelConfig(
            n_layer=2, n_head=4, n_embd=16, attention_options={"generator_widths": (8,)}, block_size=12, vocab_size=11), variant))
        config.auto_map = remote_code.auto_map()
        model = hf.DamchaForCausalLM(config).eval()
        with torch.no_grad():  # off the initial values: maps that start at zero would hide a wrong load
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
            expected[variant] = model(tokens).logits
        model.save_pretrained(tmp_path / variant)
        remote_code.write_code(tmp_path / variant, "test")
        folders[variant] = tmp_path / variant
    loaded = _in_colleague(colleague, folders, tokens, tmp_path)
    for variant, (module, logits) in loaded.items():
        assert module.startswith("damcha.hf.models"), (variant, module)  # the bundled code, served under its name
        assert torch.allclose(torch.tensor(logits), expected[variant], atol=1e-5, rtol=0), variant


def test_a_second_folder_with_other_code_is_refused_in_a_process_that_runs_the_first(colleague, tmp_path):
    """Two --with-code folders of different code loaded in one process: the second ran the first folder's bundle
    (install() stood aside once one was installed). It is refused in words; a folder of the same code loads."""
    torch.manual_seed(0)
    config = hf.DamchaConfig.from_model_config(ModelConfig(n_layer=1, n_head=4, n_embd=16, block_size=12, vocab_size=11))
    config.auto_map = remote_code.auto_map()
    model = hf.DamchaForCausalLM(config).eval()
    for name, version in (("first", "1.0"), ("same", "1.0"), ("other", "2.0")):
        model.save_pretrained(tmp_path / name)
        remote_code.write_code(tmp_path / name, version)
    bundle = tmp_path / "other" / remote_code.BUNDLE_FILE  # another version's code: one module's source differs
    text = bundle.read_text()
    sources = remote_code.bundled_sources()
    sources["damcha.model.config"] = (False, sources["damcha.model.config"][1] + "\nOTHER_VERSION = True\n")
    import base64
    import zlib

    blob = base64.b64encode(zlib.compress(json.dumps(sources).encode(), 9)).decode()
    start, end = text.index('b64decode("""') + len('b64decode("""'), text.index('""")))')
    bundle.write_text(text[:start] + "\n" + "\n".join(blob[i:i + 100] for i in range(0, len(blob), 100)) + "\n" + text[end:])
    tokens = torch.zeros(1, 4, dtype=torch.long)
    loaded = _in_colleague(colleague, {"first": tmp_path / "first", "same": tmp_path / "same"}, tokens, tmp_path)
    assert set(loaded) == {"first", "same"}
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["HF_MODULES_CACHE"] = str(tmp_path / "hf-modules")
    done = subprocess.run([colleague, "-c", LOAD, json.dumps({"first": str(tmp_path / "first"),
                                                              "other": str(tmp_path / "other")}),
                           json.dumps(tokens.tolist())], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert done.returncode != 0 and "this process already runs the different code of damcha 1.0" in done.stderr, \
        done.stderr[-2000:]


def test_export_hf_with_code_writes_a_folder_that_says_how_it_loads(colleague, tmp_path, capsys):
    out, plain = tmp_path / "shared", tmp_path / "plain"
    assert main(["export-hf", str(ROOT / "checkpoints" / "text-damcha"), "--out", str(out), "--with-code"]) == 0
    assert "loads with trust_remote_code=True where damcha is not installed" in capsys.readouterr().out
    assert main(["export-hf", str(ROOT / "checkpoints" / "text-damcha"), "--out", str(plain)]) == 0
    assert "loads where the damcha package is installed" in capsys.readouterr().out
    assert "trust_remote_code=True" in (out / "README.md").read_text()
    assert "needs the damcha package" in (plain / "README.md").read_text()
    assert not any((plain / name).exists() for name in remote_code.CODE_FILES)
    assert json.loads((out / "config.json").read_text())["auto_map"] == remote_code.auto_map()
    assert "auto_map" not in json.loads((plain / "config.json").read_text())
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # with the package: its registered classes, no remote code run
        ours = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
        assert type(ours) is hf.DamchaForCausalLM
        expected = ours(tokens).logits
    (module, logits), = _in_colleague(colleague, {"shared": out}, tokens, tmp_path).values()
    assert torch.allclose(torch.tensor(logits), expected, atol=1e-5, rtol=0)
    assert all(oct(p.stat().st_mode & 0o777) == "0o644" for p in out.iterdir()), "a colleague could not read a file"


def test_the_app_says_which_way_a_folder_was_written(tmp_path):
    from damcha.runs.checkpoints import load_run

    main(["export-hf", str(ROOT / "checkpoints" / "digits-mha"), "--out", str(tmp_path / "shared"), "--with-code"])
    main(["export-hf", str(ROOT / "checkpoints" / "digits-mha"), "--out", str(tmp_path / "plain")])
    assert any("carries its modelling code" in line for line in load_run(tmp_path / "shared").raw_config["provenance"])
    assert any("needs the damcha package" in line for line in load_run(tmp_path / "plain").raw_config["provenance"])
