"""The platform tag, proven: auditwheel's symbol-version check decides which manylinux tag a wheel's libraries fit,
with exactly torch's, the NVIDIA wheels' and the driver's libraries accepted as external; the build then takes
its target tag, or the newer one proven."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from packaging.utils import parse_wheel_filename

from . import pins as pins_mod, proc
from .errors import OeqWheelsError
from .files import remembered


ARCH_SUFFIX = r"(x86_64|aarch64)"  # the architectures whose manylinux tags we read


def manylinux_version(tag: str) -> tuple[int, int] | None:
    """The glibc of a manylinux tag of x86_64 or aarch64 (None for any other tag)."""
    m = re.fullmatch(rf"manylinux_(\d+)_(\d+)_{ARCH_SUFFIX}", tag)
    if m:
        return int(m.group(1)), int(m.group(2))
    legacy = {"manylinux1_x86_64": (2, 5), "manylinux2010_x86_64": (2, 12), "manylinux2014_x86_64": (2, 17),
              "manylinux2014_aarch64": (2, 17)}
    return legacy.get(tag)


def tag_arch(tag: str) -> str | None:
    """x86_64 or aarch64 for a manylinux or linux platform tag."""
    m = re.search(rf"_{ARCH_SUFFIX}$", tag)
    return m.group(1) if m else None


VARIANT_LABEL = re.compile(r"[a-z0-9_.]+")


def split_variant(name: str) -> tuple[str, str | None]:
    """(the file name without its variant label, the label) of a PEP 825 variant wheel, whose name ends in its label
    after the platform tag ({name}-{version}[-{build}]-{py}-{abi}-{platform}-{label}.whl; of six parts, the third is
    a build tag only when it starts with a digit, as uv reads them); (name, None) for any other file name."""
    parts = name.removesuffix(".whl").split("-")
    if name.endswith(".whl") and VARIANT_LABEL.fullmatch(parts[-1]) and \
            (len(parts) == 7 or (len(parts) == 6 and not parts[2][:1].isdigit())):
        return "-".join(parts[:-1]) + ".whl", parts[-1]
    return name, None


def wheel_arch(filename: str) -> str | None:
    """The architecture of a (single-tag) wheel, by its file name (a variant wheel's too)."""
    return tag_arch(next(iter(parse_wheel_filename(split_variant(filename)[0])[3])).platform)


def external_ok(p: pins_mod.Pins) -> frozenset[str]:
    """What a wheel may leave to torch, the NVIDIA wheels and the driver."""
    return (p.torch_needed | p.cuda_needed
            | {f"lib{l}.so" for ob in p.oeq_lines for l in (*ob.torch_libs, ob.stub_library)}
            | {s for ob in p.oeq_lines for s in ob.cuda_sonames()})


def audit(wheel: Path, memo_dir: Path | None = None) -> dict:
    """auditwheel's analysis of the wheel (its JSON report)."""
    def ask() -> dict:
        res = proc.run([sys.executable, "-m", "auditwheel", "show", "--json", str(wheel)],
                       capture_output=True, text=True)
        if res.returncode != 0:
            raise OeqWheelsError(f"auditwheel show failed: {res.stderr.strip()[-2000:]}")
        return json.loads(res.stdout)
    return remembered("auditwheel", wheel, ask, memo_dir)


def proven_tag(report: dict, allowed: frozenset[str]) -> tuple[str | None, list[str]]:
    """The manylinux tag auditwheel's symbol-version check proves, and any reasons it can't.

    auditwheel's overall tag is linux_x86_64 for every torch extension, because
    libtorch and the CUDA libraries come from other wheels (torch, nvidia-*), not
    from this one; like `auditwheel repair --exclude`, we accept exactly those as
    external and take the tag its symbol-version policy check proves.
    """
    problems = []
    extra = sorted(set(report.get("external_libs", {})) - allowed)
    if extra:
        problems.append(f"auditwheel: unexpected external libraries {extra}")
    if report.get("unsupported_isa"):
        problems.append(f"auditwheel: unsupported ISA extensions {report['unsupported_isa']}")
    tag = report.get("sym_tag")
    if not tag or manylinux_version(tag) is None:
        problems.append(f"auditwheel proves no manylinux tag (symbol policy: {tag})")
        return None, problems
    return tag, problems


def choose_tag(target: str, proven: str) -> str:
    """The target tag if the binary fits it, else the (newer) tag that is proven."""
    if tag_arch(proven) != tag_arch(target):
        raise OeqWheelsError(f"auditwheel proves {proven} for a build that targets {target}: the binary is of "
                             "another architecture than its pins")
    return target if manylinux_version(proven) <= manylinux_version(target) else proven
