"""The product folders hold only what is theirs: oeq_wheels/ext (fastmace-oeq-ext) and oeq_wheels/oeq (the binary
OpenEquivariance) never import each other; what both use lives beside them (toolchain.py, wheelfile.py, gate_common.py).
The pipeline never needs its checks: only the verbs (cli.py) import oeq_wheels/checks (stand-ins, test venvs, install
checks), so that a build or a release step cannot come to depend on a stand-in."""
import ast

from support import REPO

PRODUCTS = ("ext", "oeq")
FOLDERS = (*PRODUCTS, "checks", "release")


def imported_folders(source: str, package: tuple[str, ...]) -> set[str]:
    """The folders of oeq_wheels (FOLDERS) a module of `package` (("oeq_wheels", "oeq")) imports, however it spells
    the import."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = list(package[:len(package) - node.level + 1]) if node.level else []
            target = [*base, *(node.module.split(".") if node.module else [])]
            names = [target + [a.name] for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names]
        else:
            continue
        found |= {n[1] for n in names if len(n) > 1 and n[0] == "oeq_wheels" and n[1] in FOLDERS}
    return found


def test_no_product_imports_the_others_folder():
    crossing = [f"{m.relative_to(REPO)} imports oeq_wheels/{other}" for product in PRODUCTS
                for m in (REPO / "oeq_wheels" / product).glob("*.py")
                for other in imported_folders(m.read_text(), ("oeq_wheels", product)) & set(PRODUCTS) - {product}]
    assert not crossing, crossing


def test_only_the_verbs_import_the_checks():
    pipeline = [m for m in (REPO / "oeq_wheels").rglob("*.py")
                if "checks" not in m.relative_to(REPO).parts and m.name != "cli.py" and "__pycache__" not in m.parts]
    leaking = [f"{m.relative_to(REPO)} imports oeq_wheels/checks" for m in pipeline
               if "checks" in imported_folders(m.read_text(), m.relative_to(REPO).parent.parts)]
    assert not leaking, leaking


def test_an_import_across_products_is_seen():
    oeq = ("oeq_wheels", "oeq")
    for text in ("from ..ext import compile as cc\n", "from ..ext.assemble import pack\n",
                 "import oeq_wheels.ext.link\n", "from .. import ext\n", "from oeq_wheels.ext import verify\n"):
        assert imported_folders(text, oeq) == {"ext"}, text
    assert imported_folders("from ..toolchain import Toolchain\nfrom . import wheel\nimport os\n", oeq) == {"oeq"}
    release = ("oeq_wheels", "release")
    for text in ("from ..checks import hosts\n", "from ..checks.venvs import pip_env\n", "import oeq_wheels.checks\n"):
        assert imported_folders(text, release) == {"checks"}, text


def own_imports(path, package: tuple[str, ...]):
    """(line, module, name or None) of each import of oeq_wheels or fastmace_oeq_ext in a file, nested ones too."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = list(package[:len(package) - node.level + 1]) if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            yield from ((node.lineno, module, a.name) for a in node.names)
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, a.name, None) for a in node.names)


def missing_imports(files) -> list[str]:
    import importlib
    import importlib.util
    out = []
    for f in files:
        rel = f.relative_to(REPO)
        package = rel.parent.parts if rel.parts[0] == "oeq_wheels" else ("fastmace_oeq_ext",) \
            if rel.parts[:2] == ("runtime", "fastmace_oeq_ext") else ()
        for line, module, name in own_imports(f, package):
            if module.split(".")[0] not in ("oeq_wheels", "fastmace_oeq_ext"):
                continue
            try:
                found = importlib.import_module(module)
            except ImportError:
                out.append(f"{rel}:{line}: no module {module}")
                continue
            if name and name != "*" and not hasattr(found, name) and not (
                    hasattr(found, "__path__") and importlib.util.find_spec(f"{module}.{name}")):
                out.append(f"{rel}:{line}: {module} has no {name}")
    return out


def test_every_import_of_our_modules_names_what_exists():
    """Nested imports too (a verb's lazy import), which only the run that reaches them would find: a renamed
    module or function fails here, not in a user's command."""
    files = [p for d in ("oeq_wheels", "runtime", "tests", "bench", "tools", "contrib") for p in (REPO / d).rglob("*.py")
             if "__pycache__" not in p.parts]
    assert not missing_imports(files), missing_imports(files)


def test_pyproject_declares_every_package():
    """setuptools installs only the packages pyproject.toml lists: a new folder left out would be missing from an
    install of the pipeline (pip install .), though every run from the checkout finds it."""
    import tomllib
    declared = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(i.parent.relative_to(REPO).parts) for i in (REPO / "oeq_wheels").rglob("__init__.py")
             if "__pycache__" not in i.parts} | {"fastmace_oeq_ext"}
    assert declared == found, f"pyproject.toml's packages differ from the folders: {sorted(declared ^ found)}"


def module_name(path, root=REPO) -> str:
    """oeq_wheels.checks.hosts for oeq_wheels/checks/hosts.py; a package by its folder's name."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, package: list[str], known: set[str]) -> set[str]:
    """The modules of `known` a module of `package` imports, anywhere in it (a function's own import closes a circle
    as surely as the top of the file): `from . import x` is module x where x is one, else its package."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            for a in node.names:
                found.add(f"{target}.{a.name}" if f"{target}.{a.name}" in known else target)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found & known


def import_graph(folder, root=REPO) -> dict[str, set[str]]:
    """Each module of a package folder -> the modules of it that it imports."""
    files = [p for p in folder.rglob("*.py") if "__pycache__" not in p.parts]
    known = {module_name(p, root) for p in files}
    graph = {}
    for p in files:
        name = module_name(p, root)
        package = name.split(".") if p.name == "__init__.py" else name.split(".")[:-1]
        graph[name] = imports_of(p.read_text(), package, known) - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of a graph (module -> modules it imports): each strongly connected set of more than one
    module, sorted (Tarjan's algorithm)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_circle_among_oeq_wheels_modules():
    graph = import_graph(REPO / "oeq_wheels")
    assert "oeq_wheels.checks.hosts" in graph["oeq_wheels.checks.rehearse"]  # the graph is read as the code spells it
    assert circles(graph) == []


def test_an_import_circle_is_seen_however_it_is_spelt(tmp_path):
    root = tmp_path / "oeq_wheels"
    (root / "checks").mkdir(parents=True)
    sources = {"__init__.py": "", "files.py": "import os\n", "checks/__init__.py": "",
               "checks/hosts.py": "def f():\n    from .mirror import url\n",  # a function's own import
               "checks/mirror.py": "from . import hosts\nfrom ..files import x\n",
               "a.py": "import oeq_wheels.b\n", "b.py": "from oeq_wheels import c\n", "c.py": "from .a import y\n"}
    for name, text in sources.items():
        (root / name).write_text(text)
    graph = import_graph(root, tmp_path)
    assert graph["oeq_wheels.checks.mirror"] == {"oeq_wheels.checks.hosts", "oeq_wheels.files"}
    assert circles(graph) == [["oeq_wheels.a", "oeq_wheels.b", "oeq_wheels.c"],
                              ["oeq_wheels.checks.hosts", "oeq_wheels.checks.mirror"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
