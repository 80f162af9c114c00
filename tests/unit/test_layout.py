"""The product folders hold only what is theirs: oeq_wheels/ext (fastmace-oeq-ext) and oeq_wheels/oeq (the binary
OpenEquivariance) never import each other; what both use lives beside them (toolchain.py, wheelfile.py, gate_common.py)."""
import ast

from conftest import REPO

PRODUCTS = ("ext", "oeq")


def imported_products(source: str, package: tuple[str, ...]) -> set[str]:
    """The product folders a module of `package` (("oeq_wheels", "oeq")) imports, however it spells the import."""
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
        found |= {n[1] for n in names if len(n) > 1 and n[0] == "oeq_wheels" and n[1] in PRODUCTS}
    return found


def test_no_product_imports_the_others_folder():
    crossing = [f"{m.relative_to(REPO)} imports oeq_wheels/{other}" for product in PRODUCTS
                for m in (REPO / "oeq_wheels" / product).glob("*.py")
                for other in imported_products(m.read_text(), ("oeq_wheels", product)) - {product}]
    assert not crossing, crossing


def test_an_import_across_products_is_seen():
    oeq = ("oeq_wheels", "oeq")
    for text in ("from ..ext import compile as cc\n", "from ..ext.assemble import pack\n",
                 "import oeq_wheels.ext.link\n", "from .. import ext\n", "from oeq_wheels.ext import verify\n"):
        assert imported_products(text, oeq) == {"ext"}, text
    assert imported_products("from ..toolchain import Toolchain\nfrom . import wheel\nimport os\n", oeq) == {"oeq"}
