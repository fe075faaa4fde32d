"""The command line, one module a subcommand (add_arguments, run); `main` reads the table below and imports
the one command asked for, so `damcha --help` lists them without loading torch or the registry."""

from __future__ import annotations

import argparse
import importlib
import sys

from tqdm import tqdm

# name: (module under damcha.cli, the line `damcha --help` shows)
COMMANDS = {
    "version": ("version", "print the package version"),
    "train": ("train", "train a model, with per-epoch metrics and snapshots"),
    "figures": ("figures", "regenerate a figure set headlessly (same figure functions as the app)"),
    "import-reference": ("import_reference", "convert checkpoints of the authors' reference code into a run"),
    "evidence": ("evidence", "test the paper's claims at small scale (seeds, intervals, verdicts)"),
    "export-hf": ("export_hf", "write a run as a Hugging Face folder (damcha.hf's classes)"),
    "app": ("app", "start the app (127.0.0.1 unless --host says otherwise)"),
    "costs": ("costs", "time one training step of every run configuration of a scale's claims on this device, into "
                       "the cost table the evidence budget reads"),
    "standard-files": ("standard_files", "write generated files in the published data sets' formats (CIFAR-10 "
                                         "batches, enwik8.zip, text8) for a rehearsal of --scale tiny"),
    "demo-runs": ("demo_runs", "(re)train the shipped demo runs into checkpoints/"),
    "fid": ("fid", "FID of a pixel run's drawn images against its test images (needs damcha[fid] and the Inception "
                   "weights on disk)"),
}


def parser_for(name: str | None) -> argparse.ArgumentParser:
    """The command line's parser: every command listed, the arguments of `name` alone (its module imported)."""
    parser = argparse.ArgumentParser(prog="damcha", description="DAMCHA Lab command line")
    sub = parser.add_subparsers(dest="command", required=True)
    for command, (module, help_line) in COMMANDS.items():
        p = sub.add_parser(command, help=help_line)
        if command == name:
            importlib.import_module(f"damcha.cli.{module}").add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    name = next((a for a in argv if not a.startswith("-")), None)
    args = parser_for(name if name in COMMANDS else None).parse_args(argv)
    try:
        return importlib.import_module(f"damcha.cli.{COMMANDS[args.command][0]}").run(args)
    except (ValueError, OSError) as e:  # a refusal in words (the data, checkpoint and input errors are ValueErrors)
        _close_progress_bars()
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: what was saved is kept (a run's last complete epoch, the evidence's recorded units); run "
              "the same command again to resume", file=sys.stderr)
        return 130


def _close_progress_bars() -> None:
    """End the progress bars a refusal interrupted, so its error line stands alone and last."""
    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()
