"""The docs name the modules that exist: docs/pipeline.md's module table lists every module of oeq_wheels/ and the
runtime, and nothing else; every module name in docstrings, comments and docs (oeq_wheels.x, oeq_wheels/x.py,
release/x.py, checks/x.py, fastmace_oeq_ext.x) is a real one, so that a moved module cannot leave its old name behind."""
import ast
import re
from pathlib import Path

from support import REPO

TABLE_HEADER = "| module | stage |"
RUNTIME = REPO / "runtime" / "fastmace_oeq_ext"
# A module as code names it (oeq_wheels.release.site) and as a path (oeq_wheels/ext/compile.py, release/site.py).
DOTTED = re.compile(r"(?<![\w./-])(oeq_wheels|fastmace_oeq_ext)((?:\.\w+)+)")
PATH = re.compile(r"(?<![\w./-])((?:oeq_wheels|runtime|ext|oeq|release|checks)/(?:\w+/)*\w+\.py)\b")


def modules() -> set[str]:
    found = [*(REPO / "oeq_wheels").rglob("*.py"), *RUNTIME.glob("*.py")]
    return {p.relative_to(REPO).as_posix() for p in found
            if p.name not in ("__init__.py", "__main__.py") and "__pycache__" not in p.parts}


def table_modules(text: str) -> set[str]:
    """The modules docs/pipeline.md's table names: a row's first cell names modules (`pins.py`) or one folder
    (`ext/`), whose modules its second cell names as "`name.py`:"; a top-level row may name more in its text."""
    lines = text.splitlines()
    start = lines.index(TABLE_HEADER) + 2
    named = set()
    for row in lines[start:]:
        if not row.startswith("|"):
            break
        first, second = row.split("|")[1:3]
        folder = re.findall(r"`([\w/]+/)`", first)
        if folder:
            base = folder[0] if folder[0].startswith("runtime/") else f"oeq_wheels/{folder[0]}"
            for listed in re.findall(r"((?:`\w+\.py`,\s*)*`\w+\.py`):", second):  # `a.py`, `b.py`: what both do
                named |= {base + m for m in re.findall(r"`(\w+\.py)`", listed)}
        else:
            named |= {f"oeq_wheels/{m}" for m in re.findall(r"`(\w+\.py)`", first + second)}
    return named


def test_the_pipeline_table_lists_every_module_and_only_those():
    named = table_modules((REPO / "docs" / "pipeline.md").read_text())
    assert not modules() - named, f"docs/pipeline.md's module table lacks {sorted(modules() - named)}"
    assert not named - modules(), f"docs/pipeline.md's module table names {sorted(named - modules())}, not modules"


def test_the_table_reader_sees_a_missing_and_an_unknown_module():
    text = f"{TABLE_HEADER}\n|---|---|\n| `pins.py`, `gone.py` | x |\n| `ext/` | `compile.py`: c; `link.py`: l |\n\n"
    assert table_modules(text) == {"oeq_wheels/pins.py", "oeq_wheels/gone.py", "oeq_wheels/ext/compile.py",
                                   "oeq_wheels/ext/link.py"}


def package_names(init: Path) -> set[str]:
    """What a package's __init__.py defines or imports at its top level."""
    names = set()
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def resolves(root: str, dotted: str) -> bool:
    """oeq_wheels.x.y: a package's folders, then a module; what follows a module is its attribute."""
    where = REPO / "oeq_wheels" if root == "oeq_wheels" else RUNTIME
    for part in dotted.strip(".").split("."):
        if (where / part).is_dir():
            where = where / part
        elif (where / f"{part}.py").is_file():
            return True
        else:  # a module's own attribute (__file__) or a name the package defines or imports (__version__)
            return part.startswith("__") or part in package_names(where / "__init__.py")
    return True


def stale_names(files: list[Path]) -> list[str]:
    out = []
    for f in files:
        name = f.relative_to(REPO) if f.is_relative_to(REPO) else f.name
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            out += [f"{name}:{n}: {m.group(0)}" for m in DOTTED.finditer(line)
                    if not resolves(m.group(1), m.group(2))]
            out += [f"{name}:{n}: {m.group(1)}" for m in PATH.finditer(line)
                    if not any((base / m.group(1)).is_file() for base in (REPO, REPO / "oeq_wheels", REPO / "runtime"))]
    return out


def documented_files() -> list[Path]:
    """Code, docs and scripts, not the unit tests' own crafted names, nor CHANGELOG.md (what was, by its names)."""
    skip = {"shared", ".git", "__pycache__"}
    return sorted(p for p in REPO.rglob("*") if p.is_file() and not skip & set(p.relative_to(REPO).parts)
                  and (p.suffix in (".py", ".md", ".sh", ".toml", ".yml") or p.name == "Makefile")
                  and p.name != "CHANGELOG.md" and not p.is_relative_to(REPO / "tests" / "unit"))


def test_every_module_named_in_code_and_docs_exists():
    stale = stale_names(documented_files())
    assert not stale, "names of modules that do not exist (moved or renamed?):\n" + "\n".join(stale)


def test_a_moved_modules_old_name_is_found(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("oeq_wheels.release.site, oeq_wheels/ext/compile.py, oeq_wheels.__version__, fastmace_oeq_ext.manifest\n"
                   "oeq_wheels.site and oeq_wheels/compile.py and release/gone.py and fastmace_oeq_ext.nothing\n")
    assert [line.split(":", 1)[1] for line in stale_names([doc])] == [
        "2: oeq_wheels.site", "2: fastmace_oeq_ext.nothing", "2: oeq_wheels/compile.py", "2: release/gone.py"]
