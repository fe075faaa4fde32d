"""`damcha app`: the Streamlit app with its safe settings, wherever it is started from."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

APP_DIR = Path(__file__).resolve().parents[2] / "app"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Start the Streamlit app with its safe settings wherever it is started from. To share it, give "
                     "--host 0.0.0.0 and --allow-root for each folder visitors may open runs from; without "
                     "--allow-root, a shared app's checkpoint folder field is read-only.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument("--allow-root", action="append", default=[], metavar="DIR",
                   help="a folder visitors may open runs from (repeatable); sets DAMCHA_ALLOWED_ROOTS")


def app_command(host: str, port: int, allow_roots: list[str]) -> tuple[list[str], dict[str, str]]:
    """The command and environment that start the app: its own config (app/.streamlit/config.toml:
    5 MB uploads, no usage statistics) plus the address, port and the folders visitors may open."""
    env = dict(os.environ)
    if allow_roots:
        env["DAMCHA_ALLOWED_ROOTS"] = os.pathsep.join(str(Path(r).expanduser().resolve()) for r in allow_roots)
    command = [sys.executable, "-m", "streamlit", "run", str(APP_DIR), "--server.address", host,
               "--server.port", str(port)]
    if host not in ("127.0.0.1", "localhost", "::1"):  # visitors: exception types only, tracebacks to the log
        command += ["--client.showErrorDetails", "type"]
    return command, env



def run(args) -> int:
    if not (APP_DIR / "streamlit_app.py").is_file():
        raise OSError(f"the app is not next to this package ({APP_DIR}): run from a checkout of DAMCHA Lab")
    command, env = app_command(args.host, args.port, args.allow_root)
    # The server takes this process's place, so a signal that stops `damcha app` (a terminal's Ctrl-C, a
    # supervisor's SIGTERM) stops the server: as a child it outlived a terminated parent.
    os.execve(command[0], command, env)
    return 0  # (not reached)

