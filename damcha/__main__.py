"""`python -m damcha <command>`: the command-line entry point."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="damcha", description="DAMCHA Lab command line")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version", help="print the package version")
    args = parser.parse_args(argv)
    if args.command == "version":
        from . import __version__

        print(__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
