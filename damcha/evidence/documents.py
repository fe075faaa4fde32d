"""The evidence's own files read as a run folder's are (damcha.runs.files): results.json (`--reuse`,
`--restate`, the Evidence page), a work folder's units.jsonl and calls.jsonl. Each must be a regular file
under its size cap, checked before a byte is read (a link to /dev/zero or a FIFO is refused, not read or
waited on), nested no deeper than a DAMCHA file, and every field the runner builds on is checked for its
kind: a file that fails is one EvidenceFileError naming the file, the line where it has lines, and the
field."""

from __future__ import annotations

import numbers
import sys
from pathlib import Path
from typing import Any

from damcha.runs.files import CheckpointError, NotJSON, parse_json, read_bytes, read_json

MAX_RESULTS_BYTES = 64 * 2**20  # the shipped demo's results.json is 0.7 MB; a paper-scale one about 5 MB
MAX_LINES_BYTES = 256 * 2**20  # units.jsonl: about 1 kB a unit, 200,000 units


class EvidenceFileError(ValueError):
    """An evidence file cannot be read; the message names it."""


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "text", bool: "true/false", type(None): "null"}.get(
        type(value), "a number")


def _expect(value: Any, kind: type | tuple, where: str, wanted: str) -> Any:
    if not isinstance(value, kind) or (kind in (int, (int, float)) and isinstance(value, bool)):
        raise EvidenceFileError(f"{where}: {_kind(value)}, not {wanted}")
    return value


def _numbers_by_name(value: Any, where: str) -> None:
    """A measured value: an object of names to numbers (NaN and infinity kept: a diverged run's loss)."""
    _expect(value, dict, where, "an object of names to numbers")
    for name, number in value.items():
        if not _number(number):
            raise EvidenceFileError(f"{where}.{name[:60]}: {_kind(number)}, not a number")


def checked_results(doc: Any, path: Path) -> dict:
    """A parsed results document, the fields `--reuse`, `--restate` and the page build on checked."""
    if not isinstance(doc, dict) or not isinstance(doc.get("claims"), list):
        raise EvidenceFileError(f"{path}: not a results file of `python -m damcha evidence` (no 'claims' list)")
    for field, kind, wanted in (("scale", str, "a scale's name"), ("quick", bool, "true or false"),
                                ("files", dict, "an object"), ("sanity", dict, "an object"),
                                ("tuning", list, "a list"), ("reused_from", dict, "an object")):
        if field in doc:
            _expect(doc[field], kind, f"{path}: {field}", wanted)
    for i, claim in enumerate(doc["claims"]):
        where = f"{path}: claims[{i}]"
        _expect(claim, dict, where, "an object")
        _expect(claim.get("key"), str, f"{where}.key", "text")
        _expect(claim.get("arms", {}), dict, f"{where}.arms", "an object of arms")
        for arm, spec in claim.get("arms", {}).items():
            _expect(spec, list, f"{where}.arms.{arm[:60]}", "a list")
        for arm, values in _expect(claim.get("values", {}), dict, f"{where}.values", "an object of arms").items():
            for seed, value in enumerate(_expect(values, list, f"{where}.values.{arm[:60]}", "a list of seeds")):
                _numbers_by_name(value, f"{where}.values.{arm[:60]}[{seed}]")
        for name, expected, wanted in (("seeds", int, "a number of seeds"), ("parameters", dict, "an object")):
            if claim.get(name) is not None:
                _expect(claim[name], expected, f"{where}.{name}", wanted)
    for i, row in enumerate(doc.get("tuning", [])):
        _tuning_row(row, f"{path}: tuning[{i}]")
    return doc


def _tuning_row(row: Any, where: str) -> None:
    _expect(row, dict, where, "an object")
    _expect(row.get("configuration", []), list, f"{where}.configuration", "a list")
    for seed in _expect(row.get("seeds", []), list, f"{where}.seeds", "a list"):
        _expect(seed, int, f"{where}.seeds[]", "a whole number")
    for field in ("losses", "validation"):
        for rate, scores in _expect(row.get(field, {}), dict, f"{where}.{field}", "an object of rates").items():
            try:
                float(rate)
            except ValueError:
                raise EvidenceFileError(f"{where}.{field}: {rate[:40]!r} is not a learning rate") from None
            for score in _expect(scores, list, f"{where}.{field}.{rate}", "a list"):
                if not _number(score):
                    raise EvidenceFileError(f"{where}.{field}.{rate}[]: {_kind(score)}, not a number")
    if "validation" in row:
        _expect(row.get("metric"), str, f"{where}.metric", "a metric's name")
    if not _number(row.get("chosen", 0.0)):
        raise EvidenceFileError(f"{where}.chosen: {_kind(row.get('chosen'))}, not a learning rate")


def read_results(path: Path | str) -> dict:
    """A results.json (checked_results); EvidenceFileError naming the file and what is wrong with it."""
    path = Path(path)
    try:
        doc = read_json(path, MAX_RESULTS_BYTES, None, "results file", allow_non_finite=True)
    except CheckpointError as e:
        raise EvidenceFileError(f"{e}: results.json cannot be read (`python -m damcha evidence` writes it: run it "
                                "again to rewrite it)") from None
    return checked_results(doc, path)


def load_results(folder: Path) -> dict | None:
    """results.json of a folder (None when there is none); EvidenceFileError when it cannot be read."""
    path = Path(folder) / "results.json"
    return read_results(path) if path.exists() or path.is_symlink() else None


def read_jsonl(path: Path) -> list:
    """The rows of an append-only JSON-lines file of a work folder (numbered_rows without the numbers)."""
    return [row for _, row in numbered_rows(path)]


def numbered_rows(path: Path) -> list[tuple[int, Any]]:
    """(line number, row) of an append-only JSON-lines file of a work folder: a regular file under
    MAX_LINES_BYTES, each line bounded as any DAMCHA JSON is. A torn last line (the writer was killed
    mid-line) is cut off the file, so the next append starts on a line of its own, and reported; a bad
    line before the last one, or any line refused for its content, is an error naming the file and line."""
    if not (path.exists() or path.is_symlink()):
        return []
    try:
        raw = read_bytes(path, MAX_LINES_BYTES, None, "work folder's record")
    except CheckpointError as e:
        raise EvidenceFileError(str(e)) from None
    lines = raw.split(b"\n")
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append((i + 1, parse_json(line.decode("utf-8"), f"{path}: line {i + 1}", allow_non_finite=True)))
            continue
        except (UnicodeDecodeError, NotJSON):
            if any(rest.strip() for rest in lines[i + 1:]):
                raise EvidenceFileError(f"{path}: line {i + 1} is not valid JSON; remove it (its unit is redone)") from None
        except CheckpointError as e:  # whole but hostile (nested, a huge number): never a torn write
            raise EvidenceFileError(f"{e}; remove that line (its unit is redone)") from None
        with path.open("r+b") as f:
            f.truncate(len(b"\n".join(lines[:i])) + (1 if i else 0))
        print(f"warning: {path}: its last line was torn (a killed write) and is dropped; that unit is redone",
              file=sys.stderr)
    return rows


def read_unit_rows(path: Path) -> list[dict]:
    """units.jsonl's rows, each checked: `unit` its key, `value` what it measured (a bare number: an older
    format, kept and redone), `seconds` and `reused_from` where present."""
    rows = numbered_rows(path)
    for line, row in rows:
        where = f"{path}: line {line}"
        _expect(row, dict, where, "an object with 'unit' and 'value'")
        if "unit" not in row:
            raise EvidenceFileError(f"{where}: no 'unit'; remove that line (its unit is redone)")
        _expect(row["unit"], str, f"{where}.unit", "a unit's key (text)")
        if not _number(row.get("value")):
            _numbers_by_name(row.get("value"), f"{where}.value")
        if not _number(row.get("seconds", 0.0)):
            raise EvidenceFileError(f"{where}.seconds: {_kind(row.get('seconds'))}, not a number")
        if "reused_from" in row:
            _expect(row["reused_from"], str, f"{where}.reused_from", "a file's name")
    return [row for _, row in rows]
