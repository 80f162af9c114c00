"""Each product owns its recipe behind one module (its folder's product.py) implementing product.Product; build.py
schedules over that protocol and imports nothing else of a product's folder."""
import ast
import inspect
from pathlib import Path

from oeq_wheels import build, product

REPO = Path(__file__).resolve().parents[2]
PRODUCT_FOLDERS = ("ext", "oeq")


def folder_imports(path: Path) -> set[str]:
    """What build.py takes from the product folders: "ext.product", "oeq.gate", ..."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module in PRODUCT_FOLDERS:
            found |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 1 and node.module and \
                node.module.split(".")[0] in PRODUCT_FOLDERS:
            found.add(node.module)
    return found


def test_the_scheduler_imports_only_each_products_module():
    assert folder_imports(REPO / "oeq_wheels" / "build.py") == {f"{f}.product" for f in PRODUCT_FOLDERS}


def test_the_reader_sees_a_recipe_piece():
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".py") as f:
        f.write("from .ext import product\nfrom .oeq.stable import Recipe\nfrom .ext.gate import verify_wheel\n")
        f.flush()
        assert folder_imports(Path(f.name)) == {"ext.product", "oeq.stable", "ext.gate"}


def test_every_product_implements_the_protocol():
    wanted = {n: inspect.signature(f) for n, f in vars(product.Product).items()
              if inspect.isfunction(f) and not n.startswith("_")}
    assert {"parts", "inputs", "common", "trees", "setup", "prepare", "build", "compiles"} <= set(wanted)
    assert {p.__name__ for p in build.PRODUCTS} == {f"oeq_wheels.{f}.product" for f in PRODUCT_FOLDERS}
    for module in build.PRODUCTS:
        assert isinstance(module.NAME, str) and module.NAME
        for name, signature in wanted.items():
            got = getattr(module, name, None)
            assert callable(got), f"{module.__name__} lacks {name}"
            # the protocol's parameters after self, by count (a module's functions take no self)
            assert len(inspect.signature(got).parameters) == len(signature.parameters) - 1, (module.__name__, name)
    assert len({m.NAME for m in build.PRODUCTS}) == len(build.PRODUCTS)
