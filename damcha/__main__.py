"""`python -m damcha <command>` (or the `damcha` console script): see damcha.cli."""

import sys

from damcha.cli import main
from damcha.cli.app import app_command

__all__ = ["app_command", "main"]

if __name__ == "__main__":
    sys.exit(main())
