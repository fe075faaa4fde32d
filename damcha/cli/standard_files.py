"""`damcha standard-files`: generated files in the published data sets' formats, for a rehearsal of
--scale tiny (their content is random: they are not the data sets)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from damcha.inputs.datasets.generated import write_standard_format_files


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Generated files with the published files' names, formats and vocabularies (random content): "
                     "`evidence --scale tiny --data-dir DIR` runs on them. They are not the data sets; results on them "
                     "are a rehearsal of the code path.")
    p.add_argument("--out", required=True, help="a folder to create (refused when it exists)")


def run(args) -> int:
    out = Path(args.out)
    if os.path.lexists(out):
        raise ValueError(f"--out {out}: already exists; name a folder to create (nothing of yours is written into)")
    written = write_standard_format_files(out)
    for name, path in written.items():
        print(f"{name}: {path}")
    print(f"generated files in the standard formats (not the data sets): python -m damcha evidence --scale tiny "
          f"--data-dir {out}")
    return 0

