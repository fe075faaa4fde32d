"""A Hugging Face folder that loads where this package is not installed (`export-hf --with-code`).

The Hub's way of sharing custom models: the folder carries its modelling code and config.json an
`auto_map`, so `AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)` runs it. The
code is the package's own model layer (damcha.model, every mechanism) and its Hugging Face classes,
written once into `damcha_bundle.py` as compressed sources that an import hook serves under their
own names; `configuration_damcha.py` and `modeling_damcha.py` are the two entry points the
`auto_map` names. Where the package is installed, the hook stands aside and the package is used.
"""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path

from damcha.runs.hf_folders import CODE_FILES, OWN_AUTO_MAP

PACKAGE = Path(__file__).resolve().parents[1]  # damcha/
BUNDLE_FILE, CONFIG_CODE, MODEL_CODE = CODE_FILES
# The classes' whole import closure: the model layer imports nothing outside itself; the two Hugging Face
# modules import the model layer only (tests/integration/test_hf_remote_code.py loads every variant without the package).
BUNDLED_FILES = ("model", "hf/config.py", "hf/models.py")
# These two run heavy imports (the whole Hugging Face layer, a worker guard): bundled as bare packages.
BARE_PACKAGES = {"damcha": "DAMCHA Lab's modules bundled into a Hugging Face folder.",
                 "damcha.hf": "DAMCHA Lab's Hugging Face classes, bundled."}
MODEL_CLASSES = tuple(target.split(".")[1] for auto, target in OWN_AUTO_MAP.items() if auto != "AutoConfig")


def bundled_sources() -> dict[str, tuple[bool, str]]:
    """module name -> (is a package, source) for every module the classes run on."""
    sources = {name: (True, f'"""{doc}"""\n') for name, doc in BARE_PACKAGES.items()}
    for entry in BUNDLED_FILES:
        path = PACKAGE / entry
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            parts = file.relative_to(PACKAGE.parent).with_suffix("").parts
            package = parts[-1] == "__init__"
            sources[".".join(parts[:-1] if package else parts)] = (package, file.read_text(encoding="utf-8"))
    return sources


def auto_map() -> dict[str, str]:
    """config.json's auto_map: which class of which entry point each Auto class loads."""
    return dict(OWN_AUTO_MAP)


def write_code(folder: Path, version: str) -> None:
    """Write the three code files into `folder` (its config.json gets auto_map() from the caller)."""
    blob = base64.b64encode(zlib.compress(json.dumps(bundled_sources()).encode(), 9)).decode()
    lines = "\n".join(blob[i:i + 100] for i in range(0, len(blob), 100))
    (folder / BUNDLE_FILE).write_text(_BUNDLE.format(version=version, blob=lines), encoding="utf-8")
    (folder / CONFIG_CODE).write_text(_CONFIG, encoding="utf-8")
    assignments = "\n".join(f"{c} = _models.{c}" for c in MODEL_CLASSES)
    (folder / MODEL_CODE).write_text(_MODEL.format(names=", ".join(MODEL_CLASSES), assignments=assignments),
                                     encoding="utf-8")


# Only standard-library imports appear as import statements: Hugging Face checks that each one is
# installed before it runs the file, and the bundled modules are reached through importlib.
_BUNDLE = '''"""The DAMCHA Lab modules this folder's classes run on (damcha {version}), written by
`damcha export-hf --with-code`: the model layer with every attention mechanism, and the Hugging Face
classes. Served under their own names (damcha.*) by an import hook, only where the damcha package is
not installed; where it is, the installed package is used."""

import base64
import hashlib
import importlib.abc
import importlib.util
import json
import sys
import zlib

VERSION = "{version}"
_SOURCES = json.loads(zlib.decompress(base64.b64decode("""
{blob}
""")))
_DIGEST = hashlib.sha256(json.dumps(_SOURCES, sort_keys=True).encode()).hexdigest()


class _Bundle(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    DAMCHA_BUNDLE = (VERSION, _DIGEST)  # read by another folder's install(): which code this process already runs

    def find_spec(self, name, path=None, target=None):
        if name not in _SOURCES:
            return None
        return importlib.util.spec_from_loader(name, self, is_package=_SOURCES[name][0])

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        source = _SOURCES[module.__name__][1]
        exec(compile(source, "damcha_bundle:" + module.__name__, "exec"), module.__dict__)


def install():
    """Serve the bundled modules unless the damcha package is importable; returns which is used. A process that
    already runs another folder's different bundle refuses this one: its classes would run that other code."""
    installed = next((finder for finder in sys.meta_path if hasattr(finder, "DAMCHA_BUNDLE")), None)
    if installed is not None:
        if installed.DAMCHA_BUNDLE[1] != _DIGEST:
            raise ImportError(f"this folder carries the code of damcha {{VERSION}}, and this process already runs the "
                              f"different code of damcha {{installed.DAMCHA_BUNDLE[0]}} from another folder: its classes "
                              "would run that other code. Load this folder in a fresh Python process.")
        return "bundle"
    if "damcha" in sys.modules:
        return "package"
    spec = importlib.util.find_spec("damcha")  # a regular package: not a folder that happens to be named so
    if spec is not None and (spec.origin or "").endswith("__init__.py"):
        return "package"
    sys.meta_path.insert(0, _Bundle())
    return "bundle"
'''

_CONFIG = '''"""Entry point named by config.json's auto_map: the config class (from the damcha package where it is
installed, else from damcha_bundle.py)."""

import importlib

from .damcha_bundle import install

SOURCE = install()
DamchaConfig = importlib.import_module("damcha.hf.config").DamchaConfig
'''

_MODEL = '''"""Entry point named by config.json's auto_map: the model classes ({names})."""

import importlib

from .configuration_damcha import DamchaConfig  # noqa: F401  (installs the bundle first)

_models = importlib.import_module("damcha.hf.models")
{assignments}
'''
