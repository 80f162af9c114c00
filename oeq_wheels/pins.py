"""Load pins.toml: the versions and sha256 of every input, and the build matrix."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

PINS_FILE = Path(__file__).with_name("pins.toml")


class PinsError(ValueError):
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

    def torch_wheel(self, cp_tag: str) -> Pinned:
        try:
            return self.torch_wheels[cp_tag]
        except KeyError:
            raise PinsError(
                f"matrix {self.name!r} pins no torch wheel for {cp_tag}; "
                f"pinned: {', '.join(sorted(self.torch_wheels))}"
            ) from None


@dataclass(frozen=True)
class Pins:
    package_name: str
    import_name: str
    base_version: str
    summary: str
    license_expression: str
    platform_tag: str
    source_date_epoch: int
    oeq: Pinned
    oeq_extension_name: str
    oeq_sources: tuple[str, ...]
    pybind11: Pinned
    matrix: Matrix

    @property
    def version(self) -> str:
        """The wheel version: the base version, plus a local label for non-release matrices."""
        if self.matrix.local_version:
            return f"{self.base_version}+{self.matrix.local_version}"
        return self.base_version

    def all_inputs(self, cp_tags: list[str]) -> list[Pinned]:
        """Every file a build of these Pythons reads, for download and provenance."""
        return [self.oeq, self.pybind11, *self.matrix.nvidia] + [
            self.matrix.torch_wheel(t) for t in cp_tags
        ]


def cp_tag(version: str) -> str:
    """'3.12' -> 'cp312'."""
    major, minor = version.split(".")
    return f"cp{major}{minor}"


def load(matrix: str | None = None, path: Path = PINS_FILE) -> Pins:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PinsError(f"cannot read pins file {path}: {exc}") from exc
    name = matrix or data["build"]["default_matrix"]
    matrices = data.get("matrix", {})
    if name not in matrices:
        raise PinsError(
            f"unknown matrix {name!r}; pins.toml defines: {', '.join(sorted(matrices))}"
        )
    m = matrices[name]
    torch_wheels = {
        tag: Pinned("torch", m["torch_version"], w["file"], w["sha256"])
        for tag, w in m["torch_wheels"].items()
    }
    nvidia = tuple(
        Pinned(n["name"], n["version"], n["file"], n["sha256"], tuple(n.get("libs", ())))
        for n in m["nvidia"]
    )
    mat = Matrix(
        name=name,
        pythons=tuple(m["pythons"]),
        torch_version=m["torch_version"],
        torch_local=m["torch_local"],
        cuda=m["cuda"],
        torch_wheels=torch_wheels,
        nvidia=nvidia,
        local_version=m.get("local_version"),
    )
    for py in mat.pythons:
        mat.torch_wheel(cp_tag(py))  # every listed Python must have its torch wheel
    pkg, oeq, pyb = data["package"], data["openequivariance"], data["pybind11"]
    return Pins(
        package_name=pkg["name"],
        import_name=pkg["import_name"],
        base_version=pkg["version"],
        summary=pkg["summary"],
        license_expression=pkg["license_expression"],
        platform_tag=pkg["platform_tag"],
        source_date_epoch=int(pkg["source_date_epoch"]),
        oeq=Pinned("openequivariance", oeq["version"], oeq["file"], oeq["sha256"]),
        oeq_extension_name=oeq["extension_name"],
        oeq_sources=tuple(oeq["sources"]),
        pybind11=Pinned("pybind11", pyb["version"], pyb["file"], pyb["sha256"]),
        matrix=mat,
    )


def select_pythons(pins: Pins, requested: list[str] | None) -> list[str]:
    """The Python versions to build: all of the matrix, or a checked subset."""
    if not requested:
        return list(pins.matrix.pythons)
    unknown = [v for v in requested if v not in pins.matrix.pythons]
    if unknown:
        raise PinsError(
            f"Python {', '.join(unknown)} is not in matrix {pins.matrix.name!r}; "
            f"it pins: {', '.join(pins.matrix.pythons)} (use --python with those, "
            "or add the version and its torch wheel to oeq_wheels/pins.toml)"
        )
    return list(dict.fromkeys(requested))
