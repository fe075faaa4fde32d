"""The command line is a table of subcommands, one module each: `damcha --help` lists them without loading
torch or the mechanism registry, and each command's own --help builds its arguments."""

import subprocess
import sys
from pathlib import Path

import pytest

from damcha.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]


def test_the_top_level_help_lists_every_command_without_loading_torch():
    probe = ("import sys\nfrom damcha.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in ('torch', 'damcha.model.mechanisms', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert all(command in out for command in COMMANDS)
    assert out.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_answers_its_own_help(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    assert f"usage: damcha {command}" in capsys.readouterr().out


def test_an_unknown_command_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as done:
        main(["tarin"])
    assert done.value.code == 2 and "invalid choice: 'tarin'" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "expected"), [
    (["export-hf", "runs/a", "--out", "hf"], {"run": "runs/a", "out": "hf"}),
    (["import-reference", "ckpt.pt", "--out", "run"], {"source": "ckpt.pt", "out": "run"}),
    (["figures", "--run", "runs/a", "--text", "t.txt", "--out", "figs"], {"run": "runs/a", "text": "t.txt"}),
    (["evidence", "--scale", "tiny", "--launcher", "slurm", "--slurm-sbatch", "exclude=n7"],
     {"scale": "tiny", "slurm_sbatch": [("exclude", "n7")]}),
    (["app", "--host", "0.0.0.0", "--allow-root", "runs"], {"host": "0.0.0.0", "allow_root": ["runs"]}),
])
def test_each_commands_positional_and_flags_parse_as_documented(argv, expected):
    """(export-hf lost its RUN positional in the split; the robustness battery found it.)"""
    from damcha.cli import parser_for

    args = parser_for(argv[0]).parse_args(argv)
    assert {k: getattr(args, k) for k in expected} == expected
