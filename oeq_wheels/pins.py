"""Load pins.toml: the versions and sha256 of every input, the build matrix, and the
names that follow from them (library file, link libraries, sonames, RUNPATH, tags)."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from .errors import UsageError

PINS_FILE = Path(__file__).with_name("pins.toml")
DRIVER_SONAME = "libcuda.so.1"


class PinsError(UsageError):
    """The pins file or a requested matrix/Python does not make sense."""


@dataclass(frozen=True)
class Pinned:
    """One downloadable file, pinned by name, version and sha256."""

    name: str
    version: str
    file: str
    sha256: str
    libs: tuple[str, ...] = ()

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Matrix:
    name: str
    pythons: tuple[str, ...]
    torch_version: str
    torch_local: str
    cuda: str
    torch_wheels: dict[str, Pinned]  # keyed by CPython tag, e.g. "cp312"
    nvidia: tuple[Pinned, ...]
    local_version: str | None

    def torch_wheel(self, cp: str) -> Pinned:
        try:
            return self.torch_wheels[cp]
        except KeyError:
            raise PinsError(
                f"matrix {self.name!r} pins no torch wheel for {cp}; "
                f"pinned: {', '.join(sorted(self.torch_wheels))}"
            ) from None

    @property
    def cuda_major(self) -> str:
        return self.cuda.split(".")[0]


@dataclass(frozen=True)
class OeqBinary:
    """The binary openequivariance wheels: OEq's stable extension, one build for every CUDA 13 torch."""

    local_version: str
    pythons: tuple[str, ...]
    torch: Pinned             # the oldest supported torch's wheel: headers and libraries
    torch_matrix: str
    torch_min: str
    cuda_major: str
    nvidia: tuple[Pinned, ...]
    nanobind: Pinned
    tested_torch: tuple[str, ...]
    module_name: str = "oeq_stable_cuda"
    aoti_library: str = "liboeq_stable_cuda_aoti.so"
    torch_libs: tuple[str, ...] = ("torch_cpu", "c10")  # OEq's CMakeLists links CPU LibTorch only
    stub_library: str = "torch_cuda"   # OEq's stream stub, named like the library it stands in for

    def version(self, oeq_version: str) -> str:
        return f"{oeq_version}+{self.local_version}"

    def runpath(self) -> str:
        # openequivariance/_torch/extlib/ is three levels below site-packages.
        return runpath(3, self.cuda_major)

    def cuda_sonames(self) -> tuple[str, ...]:
        return tuple(l for n in self.nvidia for l in n.libs)


@dataclass(frozen=True)
class Pins:
    package_name: str
    import_name: str
    base_version: str
    summary: str
    license_expression: str
    urls: tuple[tuple[str, str], ...]  # Project-URL label, URL (PyPI's sidebar)
    platform_tag: str
    source_date_epoch: int
    oeq: Pinned
    oeq_extension_name: str
    oeq_sources: tuple[str, ...]
    oeq_python_source: str
    torch_libs: tuple[str, ...]
    pybind11: Pinned
    matrix: Matrix
    oeq_binary: OeqBinary

    @property
    def version(self) -> str:
        """The wheel version: the base version, plus a local label for non-release matrices."""
        if self.matrix.local_version:
            return f"{self.base_version}+{self.matrix.local_version}"
        return self.base_version

    @property
    def library_file(self) -> str:
        return f"{self.oeq_extension_name}.so"

    @property
    def torch_needed(self) -> frozenset[str]:
        return frozenset(f"lib{l}.so" for l in self.torch_libs)

    @property
    def cuda_needed(self) -> frozenset[str]:
        """The CUDA libraries the prebuilt links by soname, and the driver."""
        return frozenset([*(l for n in self.matrix.nvidia for l in n.libs), DRIVER_SONAME])

    def runpath(self) -> str:
        # fastmace_oeq_ext/ sits directly in site-packages, beside torch/ and nvidia/.
        return runpath(1, self.matrix.cuda_major)

    def all_inputs(self, cp_tags: list[str]) -> list[Pinned]:
        """Every file a build of these Pythons reads, for download and provenance."""
        return [self.oeq, self.pybind11, *self.matrix.nvidia] + [self.matrix.torch_wheel(t) for t in cp_tags]

    def oeq_binary_inputs(self) -> list[Pinned]:
        b = self.oeq_binary
        return [self.oeq, b.nanobind, b.torch, *b.nvidia]


def runpath(depth: int, cuda_major: str) -> str:
    """RUNPATH from a library `depth` directories below site-packages to torch's and the NVIDIA wheels' libraries."""
    up = "/".join([".."] * depth)
    return f"$ORIGIN/{up}/torch/lib:$ORIGIN/{up}/nvidia/cu{cuda_major}/lib"


def cp_tag(version: str) -> str:
    """'3.12' -> 'cp312': the one place a CPython tag is made."""
    major, minor = version.split(".")
    return f"cp{major}{minor}"


def _pinned(name: str, version: str, entry: dict) -> Pinned:
    return Pinned(name, version, entry["file"], entry["sha256"], tuple(entry.get("libs", ())))


def _nvidia(data: dict, refs: list[str], where: str) -> tuple[Pinned, ...]:
    table = data.get("nvidia", {})
    out = []
    for ref in refs:
        if ref not in table:
            raise PinsError(f"{where} names {ref!r}, which no [nvidia.\"{ref}\"] entry in pins.toml defines")
        name, _, version = ref.partition("==")
        out.append(_pinned(name, version, table[ref]))
    return tuple(out)


def load(matrix: str | None = None, path: Path = PINS_FILE) -> Pins:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PinsError(f"cannot read pins file {path}: {exc}") from exc
    name = matrix or data["build"]["default_matrix"]
    matrices = data.get("matrix", {})
    if name not in matrices:
        raise PinsError(f"unknown matrix {name!r}; pins.toml defines: {', '.join(sorted(matrices))}")
    mat = _matrix(data, name)
    for py in mat.pythons:
        mat.torch_wheel(cp_tag(py))  # every listed Python must have its torch wheel
    pkg, oeq, pyb, ob = data["package"], data["openequivariance"], data["pybind11"], data["oeq_binary"]
    ob_matrix = _matrix(data, ob["torch_matrix"])
    nb = data["nanobind"]
    return Pins(
        package_name=pkg["name"],
        import_name=pkg["import_name"],
        base_version=pkg["version"],
        summary=pkg["summary"],
        license_expression=pkg["license_expression"],
        urls=tuple(pkg.get("urls", {}).items()),
        platform_tag=pkg["platform_tag"],
        source_date_epoch=int(pkg["source_date_epoch"]),
        oeq=Pinned("openequivariance", oeq["version"], oeq["file"], oeq["sha256"]),
        oeq_extension_name=oeq["extension_name"],
        oeq_sources=tuple(oeq["sources"]),
        oeq_python_source=oeq["python_source"],
        torch_libs=tuple(oeq["torch_libs"]),
        pybind11=Pinned("pybind11", pyb["version"], pyb["file"], pyb["sha256"]),
        matrix=mat,
        oeq_binary=OeqBinary(
            local_version=ob["local_version"], pythons=tuple(ob["pythons"]),
            torch=ob_matrix.torch_wheel(ob["torch_wheel"]), torch_matrix=ob_matrix.name, torch_min=ob["torch_min"],
            cuda_major=ob["cuda_major"], nvidia=_nvidia(data, ob["nvidia"], "[oeq_binary]"),
            nanobind=Pinned("nanobind", nb["version"], nb["file"], nb["sha256"]),
            tested_torch=tuple(ob["tested_torch"])),
    )


def _matrix(data: dict, name: str) -> Matrix:
    m = data["matrix"][name]
    return Matrix(
        name=name,
        pythons=tuple(m["pythons"]),
        torch_version=m["torch_version"],
        torch_local=m["torch_local"],
        cuda=m["cuda"],
        torch_wheels={tag: Pinned("torch", m["torch_version"], w["file"], w["sha256"])
                      for tag, w in m["torch_wheels"].items()},
        nvidia=_nvidia(data, m["nvidia"], f"[matrix.{name!r}]"),
        local_version=m.get("local_version"),
    )


def select_pythons(available: tuple[str, ...], requested: list[str] | None, where: str) -> list[str]:
    """The Python versions to build: all available, or a checked subset."""
    if requested is None:
        return list(available)
    if not requested:
        raise PinsError("--python names no version; give X.Y[,X.Y...] or leave it out to build all")
    unknown = [v for v in requested if v not in available]
    if unknown:
        raise PinsError(
            f"Python {', '.join(unknown)} is not in {where}; "
            f"it pins: {', '.join(available)} (use --python with those, "
            "or add the version and its torch wheel to oeq_wheels/pins.toml)"
        )
    return list(dict.fromkeys(requested))
