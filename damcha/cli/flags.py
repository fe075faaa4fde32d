"""NAME=VALUE flags shared by the commands: a per-call choice (a word) and a setting (a number where it is one)."""

from __future__ import annotations

import argparse


def choice(text: str) -> tuple[str, str]:
    """NAME=VALUE, the value kept as the word it is (a per-call choice)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def option(text: str) -> tuple[str, object]:
    """NAME=VALUE, the value read as an integer or a number when it is one (a setting)."""
    name, value = choice(text)
    for kind in (int, float):
        try:
            return name, kind(value)
        except ValueError:
            pass
    return name, value
