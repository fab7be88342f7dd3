"""The package's layout stays one a newcomer can find their way around (docs/architecture.md).

The layers themselves are import-linter contracts in pyproject.toml (``make lint-imports``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "jupyter_gpumem"
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "labextension" not in p.parts and p.name != "_version.py")
MAX_LINES = 650
MAX_CATCH_ALLS = 30


def _catch_alls(tree: ast.AST) -> int:
    """Handlers that catch everything: bare ``except:``, ``except Exception``, ``except BaseException``."""
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler):
            kinds = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            if node.type is None or any(isinstance(k, ast.Name) and k.id in ("Exception", "BaseException") for k in kinds):
                count += 1
    return count


def test_the_package_has_modules_to_check():
    assert len(MODULES) > 30


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_is_over_650_lines(path):
    assert len(path.read_text().splitlines()) <= MAX_LINES


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
