"""bench/ is run by hand (docs/benchmarks.md), so nothing else notices when a module it uses moves: every
`module.name` it reads from an imported oeq_wheels module must exist (the rot that stopped bench/run.py after the
build: `build.verify` had moved to `tags`)."""
import ast
import importlib

import pytest

from support import REPO

BENCH = sorted((REPO / "bench").glob("*.py"))


def module_references(source: str) -> list[tuple[str, str, int]]:
    """(module, attribute, line) for each `alias.attr` where alias is an oeq_wheels module imported by name."""
    tree = ast.parse(source)
    modules = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("oeq_wheels"):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                try:
                    importlib.import_module(full)
                except ImportError:
                    continue  # a function or class, not a module
                modules[a.asname or a.name] = full
    return [(modules[n.value.id], n.attr, n.lineno) for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in modules]


@pytest.mark.parametrize("path", BENCH, ids=lambda p: p.name)
def test_every_oeq_wheels_name_bench_uses_exists(path):
    missing = [f"{path.name}:{line}: {mod}.{attr}" for mod, attr, line in module_references(path.read_text())
               if not hasattr(importlib.import_module(mod), attr)]
    assert not missing, missing
