"""The operators OpenEquivariance registers under torch.ops.libtorch_tp_jit, read from the pinned sdist's C++
sources (its TORCH_LIBRARY / STABLE_TORCH_LIBRARY blocks, through the macros that name them, and each block's
m.def("name(...")), so that a load check counts every operator OEq defines, and a re-pinned OEq's operators
without a hand-written list.

LOADED is the probe's expression for the other side: the operators the process's dispatcher holds in that namespace
(each name once, its overloads folded)."""
from __future__ import annotations

import re
import tarfile
from pathlib import Path

NAMESPACE = "libtorch_tp_jit"
REGISTRARS = ("TORCH_LIBRARY", "TORCH_LIBRARY_FRAGMENT", "STABLE_TORCH_LIBRARY", "STABLE_TORCH_LIBRARY_FRAGMENT")
SOURCES = (".cpp", ".cc", ".cu", ".hpp", ".h", ".cuh")
# Python, in a process that has loaded the extension (`import torch` done): the sorted operator names registered there.
LOADED = (f"sorted({{n.split('::', 1)[1].split('.', 1)[0] for n in torch._C._dispatch_get_all_op_names() "
          f"if n.startswith('{NAMESPACE}::')}})")


def _block(text: str, start: int) -> str:
    """The text from `start` (just after an opening brace) to its matching closing brace."""
    depth, i = 1, start
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[start:i - 1]


def registered(sources: dict[str, str], namespace: str = NAMESPACE) -> list[str]:
    """The operator names the C++ `sources` (path -> text) define in `namespace`, sorted."""
    registrars = set(REGISTRARS)
    # `#define REGISTER_LIBRARY TORCH_LIBRARY`: OEq's JIT and stable builds share one block through such a macro.
    for text in sources.values():
        registrars |= {alias for alias, target in re.findall(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+(\w+)[ \t]*$",
                                                            text, re.M) if target in REGISTRARS}
    opening = re.compile(r"(?<!\w)(" + "|".join(sorted(registrars)) + r")\s*\(\s*" + re.escape(namespace)
                         + r"\s*,\s*(\w+)\s*\)\s*\{")
    found = set()
    for text in sources.values():
        for m in opening.finditer(text):
            body = _block(text, m.end())
            found.update(re.findall(r"(?<!\w)" + re.escape(m.group(2)) + r"\s*\.\s*def\s*\(\s*\"(\w+)", body))
    return sorted(found)


def from_sdist(sdist: Path, namespace: str = NAMESPACE) -> list[str]:
    """registered() over every C/C++/CUDA source of the sdist archive."""
    with tarfile.open(sdist) as tf:
        sources = {m.name: tf.extractfile(m).read().decode("utf-8", "replace") for m in tf.getmembers()
                   if m.isfile() and m.name.endswith(SOURCES)}
    return registered(sources, namespace)
