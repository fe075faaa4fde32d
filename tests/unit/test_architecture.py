"""The package's layers import one way: model < inputs < runs < analysis < views < evidence < hf < interop < cli, and
nothing in damcha/ imports the UI. Every import counts, module-level or inside a function, except
those under `if TYPE_CHECKING:` (annotations only)."""

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "damcha"
LAYERS = ("model", "inputs", "runs", "analysis", "views", "evidence", "hf", "interop", "cli")


def imports_of(path: Path) -> list[tuple[str, int]]:
    """(imported damcha module, line) of every import that runs."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for n in ast.walk(node))
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
    return found


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "damcha" and parts[1] in LAYERS else None


def test_every_module_lives_in_a_layer_and_imports_only_downwards():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if len(rel.parts) == 1:
            assert rel.name in ("__init__.py", "__main__.py"), f"{rel}: a module outside the layers"
            continue
        own = rel.parts[0]
        assert own in LAYERS, f"{rel}: in no layer"
        for module, line in imports_of(path):
            other = layer_of(module)
            if other is not None and LAYERS.index(other) > LAYERS.index(own):
                offenders.append(f"damcha/{rel}:{line} ({own}) imports {module} ({other})")
            if module.split(".")[0] == "streamlit" or module.startswith("app"):
                offenders.append(f"damcha/{rel}:{line} imports the UI ({module})")
    assert not offenders, "\n".join(offenders)


def test_each_layer_says_its_job():
    for layer in LAYERS:
        doc = ast.get_docstring(ast.parse((PACKAGE / layer / "__init__.py").read_text()))
        assert doc and len(doc.splitlines()) <= 3, layer


def test_the_check_sees_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from damcha.views.figures import matrix_figure\n")
    assert layer_of(imports_of(bad)[0][0]) == "views"


def _loaded_by(statement: str) -> list[str]:
    """The damcha modules a fresh interpreter holds after `statement`."""
    import subprocess
    import sys

    code = f"import sys; {statement}; print('\\n'.join(sorted(m for m in sys.modules if m.startswith('damcha'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=PACKAGE.parent, check=True)
    return out.stdout.split()


def _module_path(module: str) -> Path | None:
    parts = module.split(".")[1:]
    for candidate in (PACKAGE.joinpath(*parts, "__init__.py"), PACKAGE.joinpath(*parts).with_suffix(".py")):
        if parts and candidate.is_file() or not parts and candidate.name == "__init__.py" and candidate.is_file():
            return candidate
    return None


@functools.cache
def _imported_on_import(path: Path) -> frozenset[str]:
    """The damcha modules a module's import runs: its statements outside functions and classes (and
    outside `if TYPE_CHECKING:`), a `from package import name` counting the submodule `name` where
    there is one."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()

    def visit(nodes) -> None:
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("damcha"):
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names if _module_path(f"{node.module}.{a.name}"))
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("damcha"))
            for field in ("body", "orelse", "finalbody", "handlers"):
                visit(getattr(node, field, []) or [])

    visit(tree.body)
    return frozenset(found)


def _loaded_on_import(module: str) -> set[str]:
    """Every damcha module `import module` loads, from the import statements alone: each module's
    packages first (their __init__ runs), then what each module imports as it is imported."""
    loaded, todo = set(), [module]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for k in range(1, len(parts) + 1):
            prefix = ".".join(parts[:k])
            path = _module_path(prefix)
            if prefix in loaded or path is None:
                continue
            loaded.add(prefix)
            todo += sorted(_imported_on_import(path))
    return loaded


# The package face runs the worker guard before anything else (damcha.runs.workers, standard library only).
FACE = {"damcha", "damcha.runs", "damcha.runs.workers"}
LAYER_FACES = {"model": "damcha.model.config", "inputs": "damcha.inputs.model_inputs", "runs": "damcha.runs.train",
               "analysis": "damcha.analysis.inspection", "views": "damcha.views.figure_sets",
               "evidence": "damcha.evidence.runner", "hf": "damcha.hf.config", "interop": "damcha.interop"}


def _above(layer: str, modules) -> list[str]:
    return sorted(m for m in modules if m not in FACE and layer_of(m) is not None
                  and LAYERS.index(layer_of(m)) > LAYERS.index(layer))


def test_importing_a_layer_through_the_package_face_loads_no_layer_above_it():
    """`import damcha.<layer>...` goes through damcha/__init__.py: the face must not pull the house in.
    Every module of every layer, from the import graph; one fresh interpreter checks the graph holds
    what Python loads."""
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        module = ".".join(("damcha", *rel.parts)).removesuffix(".__init__")
        above = _above(layer_of(module), _loaded_on_import(module)) if layer_of(module) else []
        if above:
            offenders[module] = above
    assert not offenders, offenders
    spot = LAYER_FACES["views"]
    assert set(_loaded_by(f"import {spot}")) == _loaded_on_import(spot)


def test_the_import_graph_sees_a_module_pulling_in_a_layer_above(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom damcha.views import figures\ndef f():\n    from damcha.evidence import runner\n")
    assert _imported_on_import(bad) == {"damcha.views", "damcha.views.figures"}  # not the import inside f
    assert "damcha.views.figures" in _loaded_on_import("damcha.views.figure_sets")


def test_the_public_names_resolve_lazily_and_all_of_them_exist():
    import damcha

    loaded = _loaded_by("import damcha")
    assert set(loaded) <= FACE, loaded
    for name in damcha.__all__:
        assert getattr(damcha, name) is not None, name
    assert "ModelConfig" in dir(damcha)
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        damcha.nonexistent  # noqa: B018
    assert damcha.__version__ == __import__("importlib.metadata").metadata.version("damcha")


def test_the_design_document_names_every_module():
    """docs/design.md's layout is where a new maintainer finds their room: every module of the package
    and of the app is in it, by its file name."""
    design = (PACKAGE.parent / "docs" / "design.md").read_text(encoding="utf-8")
    modules = [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "app").glob("*.py")]
    missing = [str(p.relative_to(PACKAGE.parent)) for p in sorted(modules)
               if p.name != "__init__.py" and p.name not in design and p.stem not in design]
    assert not missing, f"docs/design.md does not name: {missing}"


def test_no_download_button_reruns_the_page():
    """A download that reruns the page throws away the files of the other buttons (clicked in a row, some were
    lost with MediaFileStorageError): every download button of the app says on_click="ignore"."""
    root = PACKAGE.parent
    calls = []
    for path in sorted([*(root / "app").rglob("*.py"), *(root / "pages").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "download_button":
                ignored = any(k.arg == "on_click" and isinstance(k.value, ast.Constant) and k.value.value == "ignore"
                              for k in node.keywords)
                calls.append((f"{path.relative_to(root)}:{node.lineno}", ignored))
    assert len(calls) >= 7
    assert [where for where, ignored in calls if not ignored] == []
