"""Load pins.toml: the versions and sha256 of every input, the build matrix, and the
names that follow from them (library file, link libraries, sonames, RUNPATH, tags)."""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from fastmace_oeq_ext import cudaflags

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
class OeqLine:
    """One binary openequivariance line: OEq's stable extension, one build for every torch of one CUDA major."""

    name: str                 # cu130, cu128: the site's /<name>/simple/ index
    local_version: str
    pythons: tuple[str, ...]
    torch: Pinned             # the oldest supported torch's wheel: headers and libraries
    torch_local: str          # its +local label (cu130), checked against the unpacked wheel
    torch_matrix: str
    torch_min: str
    cuda: str                 # the CUDA release of the pinned NVIDIA wheels, e.g. 12.8
    driver: str               # the driver floor users need, for README and the index page
    nvidia: tuple[Pinned, ...]
    nanobind: Pinned
    tested_torch: tuple[str, ...]
    module_name: str = "oeq_stable_cuda"
    aoti_library: str = "liboeq_stable_cuda_aoti.so"
    torch_libs: tuple[str, ...] = ("torch_cpu", "c10")  # OEq's CMakeLists links CPU LibTorch only
    stub_library: str = "torch_cuda"   # OEq's stream stub, named like the library it stands in for

    @property
    def cuda_major(self) -> str:
        return self.cuda.split(".")[0]

    def version(self, oeq_version: str) -> str:
        return f"{oeq_version}+{self.local_version}"

    def runpath(self) -> str:
        # openequivariance/_torch/extlib/ is three levels below site-packages.
        return runpath(3, self.cuda_major)

    def cuda_sonames(self) -> tuple[str, ...]:
        return tuple(l for n in self.nvidia for l in n.libs)

    def inputs(self, oeq: Pinned) -> list[Pinned]:
        return [oeq, self.nanobind, self.torch, *self.nvidia]


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
    repository: str                      # owner/name on GitHub: the public address
    matrix: Matrix
    oeq_lines: tuple[OeqLine, ...]       # newest CUDA first

    def oeq_line(self, name: str) -> OeqLine:
        for line in self.oeq_lines:
            if line.name == name:
                return line
        raise PinsError(f"no OEq line {name!r}; pins.toml defines: {', '.join(l.name for l in self.oeq_lines)}")

    @property
    def oeq_binary(self) -> OeqLine:
        """The OEq line of the release matrix's CUDA major (what fastmace-oeq-ext users install beside it)."""
        return next(l for l in self.oeq_lines if l.cuda_major == self.matrix.cuda_major)

    @property
    def pythons(self) -> tuple[str, ...]:
        """Every CPython either package is built for."""
        return tuple(dict.fromkeys(self.matrix.pythons + self.oeq_lines[0].pythons))

    @property
    def site_url(self) -> str:
        """The GitHub Pages site of `repository`, which serves the binary OEq indexes."""
        owner, name = self.repository.split("/")
        return f"https://{owner.lower()}.github.io/{name}/"

    def index_url(self, line: str) -> str:
        return f"{self.site_url}{line}/simple/"

    def install_lines(self) -> list[str]:
        """The install commands README, the site's page and the PyPI description show."""
        out = []
        for line in self.oeq_lines:
            url = self.index_url(line.name)
            if line.cuda_major == self.matrix.cuda_major:
                out.append(f"pip install {self.package_name} --extra-index-url {url}")
                out.append(f"pip install torch openequivariance=={self.oeq.version} --extra-index-url {url}")
            else:  # PyPI's plain `torch` is a CUDA 13 build: this line names its torch
                out.append(f"pip install torch=={line.tested_torch[0]} openequivariance=={self.oeq.version} "
                           f"--extra-index-url {url}")
        return out

    @property
    def project_urls(self) -> tuple[tuple[str, str], ...]:
        """Project-URL lines: this project's own (derived from `repository`), then pins.toml's."""
        own = (("Source", f"https://github.com/{self.repository}"), ("Binary index", self.site_url))
        return own + self.urls

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
        """Every file the OEq lines read."""
        return list(dict.fromkeys(p for line in self.oeq_lines for p in line.inputs(self.oeq)))


def runpath(depth: int, cuda_major: str) -> str:
    """RUNPATH from a library `depth` directories below site-packages to torch's and the NVIDIA wheels' libraries."""
    up = "/".join([".."] * depth)
    return ":".join(f"$ORIGIN/{up}/{d}" for d in ["torch/lib", *cudaflags.layout_lib_dirs(cuda_major)])


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
    if not mat.pythons:
        raise PinsError(f"matrix {name!r} serves an OEq line only (no {data['package']['name']} build); "
                        f"choose one of: {', '.join(sorted(n for n, m in matrices.items() if m['pythons']))}")
    for py in mat.pythons:
        mat.torch_wheel(cp_tag(py))  # every listed Python must have its torch wheel
    pkg, oeq, pyb, ob = data["package"], data["openequivariance"], data["pybind11"], data["oeq_binary"]
    repository = pkg.get("repository", "")
    if not re.fullmatch(r"[A-Za-z0-9-]+/[A-Za-z0-9._-]+", repository):
        raise PinsError(f"[package] repository = {repository!r} in {path} is not owner/name on GitHub; set it to "
                        "this project's repository")
    nb = data["nanobind"]
    nanobind = Pinned("nanobind", nb["version"], nb["file"], nb["sha256"])
    lines = []
    for line_name, ln in ob["lines"].items():
        where = f"[oeq_binary.lines.{line_name}]"
        tm = _matrix(data, ln["torch_matrix"])
        lines.append(OeqLine(
            name=line_name, local_version=ln["local_version"], pythons=tuple(ob["pythons"]),
            torch=tm.torch_wheel(ln["torch_wheel"]), torch_local=tm.torch_local, torch_matrix=tm.name,
            torch_min=ln["torch_min"], cuda=ln["cuda"], driver=ln["driver"],
            nvidia=_nvidia(data, ln["nvidia"], where), nanobind=nanobind, tested_torch=tuple(ln["tested_torch"])))
        if tm.cuda != lines[-1].cuda:
            raise PinsError(f"{where} says CUDA {lines[-1].cuda}, its torch matrix {tm.name!r} CUDA {tm.cuda}")
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
        repository=repository,
        matrix=mat,
        oeq_lines=tuple(sorted(lines, key=lambda l: tuple(int(x) for x in l.cuda.split(".")), reverse=True)),
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
