"""`damcha version`: the package's version."""

from __future__ import annotations

import argparse

from damcha import __version__


def add_arguments(p: argparse.ArgumentParser) -> None:
    """It takes none."""


def run(args) -> int:
    print(__version__)
    return 0
