"""`damcha import-reference`: checkpoints of the authors' reference code as a run (nothing unpickled)."""

from __future__ import annotations

import argparse
import json

from tqdm import tqdm

from damcha.runs.reference import READINGS, import_reference


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Convert a .pt file (or a folder of checkpoint_epoch_N.pt files) written by the authors' "
                     "reference implementation into a DAMCHA Lab run (config + safetensors). Loaded with "
                     "torch.load(weights_only=True): nothing is unpickled.")
    p.add_argument("source", help="a .pt file or a folder of them")
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--modality", choices=tuple(READINGS),
                   help="what the model read (default: from the file's components — patches read in place for an "
                        "image run, token ids for a text run — else CIFAR patches)")
    p.add_argument("--tokenizer", help="text models: the tokenizer it used (facebook/bart-base, "
                                       "bert-base-multilingual-cased), for its vocabulary size")
    p.add_argument("--vocab-size", type=int, help="text models: vocabulary size (instead of --tokenizer)")
    p.add_argument("--block-size", type=int, help="context length (default: 64 patches, 128 tokens)")
    p.add_argument("--n-head", type=int, help="heads (default: the file's config, else the head-block masks; needed "
                                              "for older files of M0 or W_q/W_k models)")
    p.add_argument("--diag-scale", type=float, help="overrides the file's diag_scale (default: its config, else 1)")
    p.add_argument("--off-diag-scale", type=float,
                   help="overrides the file's off_diag_scale (default: off_diag_params, else its config, else 1)")


def run(args) -> int:
    with tqdm(desc="converting", unit="file") as bar:
        def converted(done: int, total: int) -> None:
            bar.total = total
            bar.update(1)

        out = import_reference(args.source, args.out, args.modality, args.block_size, args.vocab_size, args.tokenizer,
                               args.diag_scale, args.n_head, args.off_diag_scale, progress=converted)
    config = json.loads((out / "config.json").read_text())
    report = next(iter(config["train"]["import_report"].values()))
    print(f"wrote {out}: {config['model']['attention']} ({len(report['mapped'])} tensors mapped, "
          f"{len(report['duplicates'])} shared copies checked, {len(report['unknown'])} unknown)")
    for key in report["unknown"]:
        print(f"  unknown key (not used): {key}")
    for note in config["notes"]:
        print(f"  note: {note}")
    return 0

