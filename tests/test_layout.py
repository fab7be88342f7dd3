"""The package's layout stays one a newcomer can find their way around (docs/architecture.md).

The layers themselves are import-linter contracts in pyproject.toml (``make lint-imports``).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "jupyter_gpumem"
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "labextension" not in p.parts and p.name != "_version.py")
MAX_LINES = 650
MAX_FUNCTION_LINES = 60
MAX_CATCH_ALLS = 30


def _catch_alls(tree: ast.AST) -> int:
    """Handlers that catch everything: bare ``except:``, ``except Exception``, ``except BaseException``."""
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler):
            kinds = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            if node.type is None or any(
                isinstance(k, ast.Name) and k.id in ("Exception", "BaseException") for k in kinds
            ):
                count += 1
    return count


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str) -> bool:
    where = PACKAGE.parent / dotted.replace(".", "/")
    return where.with_suffix(".py").exists() or (where / "__init__.py").exists()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_names_taken(tree: ast.AST, importer: str) -> list[str]:
    """``module.name`` for each private name of another jupyter_gpumem module that ``tree`` imports
    (``from m import _x``) or reads from an imported module (``m._x``)."""
    modules: dict[str, str] = {}
    taken = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("jupyter_gpumem"):
            for alias in node.names:
                if _is_module(f"{node.module}.{alias.name}"):
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                elif _private(alias.name) and node.module != importer:
                    taken.append(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("jupyter_gpumem") and alias.asname:
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr):
            module = modules.get(node.value.id)
            if module is not None and module != importer:
                taken.append(f"{module}.{node.attr}")
    return taken


def test_the_package_has_modules_to_check():
    assert len(MODULES) > 30


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_is_over_650_lines(path):
    assert len(path.read_text().splitlines()) <= MAX_LINES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_function_is_over_60_lines(path):
    """From ``def`` to its last line, docstring included: a longer one reads and computes at once."""
    long = {
        node.name: node.end_lineno - node.lineno + 1
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno >= MAX_FUNCTION_LINES
    }
    assert long == {}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_each_module_opens_with_a_docstring(path):
    doc = ast.get_docstring(ast.parse(path.read_text()))
    assert doc and len(doc.split()) >= 4, "the docstring says what the module answers"


def test_at_most_30_catch_alls_in_the_package():
    per_module = {str(p.relative_to(PACKAGE)): _catch_alls(ast.parse(p.read_text())) for p in MODULES}
    total = sum(per_module.values())
    assert total <= MAX_CATCH_ALLS, {k: v for k, v in sorted(per_module.items()) if v}


def test_the_catch_all_counter_sees_every_form():
    code = "try: pass\nexcept: pass\ntry: pass\nexcept (ValueError, Exception): pass\ntry: pass\nexcept BaseException: pass\ntry: pass\nexcept ValueError: pass\n"
    assert _catch_alls(ast.parse(code)) == 3


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_takes_a_private_name_of_another(path):
    """What a module shares is public: a name with a leading underscore stays in its module."""
    assert private_names_taken(ast.parse(path.read_text()), _module_name(path)) == []


def test_the_private_name_check_sees_imports_and_attribute_reads():
    code = (
        "from jupyter_gpumem.doctor.text import _hidden, shown\n"
        "from jupyter_gpumem.doctor import names\n"
        "import jupyter_gpumem.core.units as units\n"
        "names._walk(); units._scale; names.public(); self._own\n"
    )
    taken = private_names_taken(ast.parse(code), "jupyter_gpumem.doctor.report")
    assert sorted(taken) == [
        "jupyter_gpumem.core.units._scale",
        "jupyter_gpumem.doctor.names._walk",
        "jupyter_gpumem.doctor.text._hidden",
    ]


def test_a_module_may_use_its_own_private_names():
    code = "from jupyter_gpumem.doctor.text import _hidden\n"
    assert private_names_taken(ast.parse(code), "jupyter_gpumem.doctor.text") == []


def test_import_contracts_hold_in_a_checkout_that_was_never_built(tmp_path):
    """``lint-imports`` before any build: no ``_version.py``, no built lab extension. The layers and
    single-entry contracts in pyproject.toml are checked on the source alone."""
    shutil.copy(PACKAGE.parent / "pyproject.toml", tmp_path)
    shutil.copytree(
        PACKAGE,
        tmp_path / "jupyter_gpumem",
        ignore=shutil.ignore_patterns("labextension", "_version.py", "__pycache__"),
    )
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert 'type = "layers"' in (tmp_path / "pyproject.toml").read_text() and ", 0 broken." in result.stdout
