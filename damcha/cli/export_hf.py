"""`damcha export-hf`: a token run as a Hugging Face folder (damcha.hf's classes), checked by reloading it."""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Convert a token run (digits, text, classifier) into a folder that AutoModelForCausalLM / "
                     "AutoModelForSequenceClassification load after `import damcha.hf`; the folder is loaded back and "
                     "its logits compared with the run's. Needs pip install 'damcha[hf]'.")
    p.add_argument("run", help="run directory")
    p.add_argument("--out", required=True, help="a new (or empty) folder to write: config.json, model.safetensors; "
                   "an existing folder holding anything is refused")
    p.add_argument("--epoch", type=int, help="the snapshot to export (default: the last)")
    p.add_argument("--with-code", action="store_true", help="also write the modelling code and an auto_map, so the "
                   "folder loads with trust_remote_code=True where damcha is not installed (the Hub's way of sharing "
                   "custom models)")


def run(args) -> int:
    try:
        from damcha.hf import export_run
    except ImportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    done = export_run(args.run, args.out, args.epoch, with_code=args.with_code)
    print(f"wrote {done.folder} (epoch {done.epoch}); its logits match the run's to {done.max_difference:.1e}")
    print("it carries its modelling code: it loads with trust_remote_code=True where damcha is not installed"
          if args.with_code else "it loads where the damcha package is installed (import damcha.hf); "
          "--with-code writes a folder that loads without it")
    return 0

