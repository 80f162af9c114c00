"""manifest.json: the one format the build writes, verify checks and the runtime reads.

Standard library only (it ships in the wheel). `Manifest.from_json` refuses any
malformed field with a ManifestError that names it, so a damaged manifest is a
reason, never a crash.

FastMACE reads the same file (fastmace.kernels._oeq_runtime.prebuilt_extension) and
knows the keys of 0.7.0.post1's manifest only: CONSUMER_KEYS. Each of them is written
in post1's value format beside our own fields; the ones that repeat one of our fields
under post1's name (ALIASES) are derived when written and must agree when read.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

SCHEMA = 3
# The binary OEq wheel's build record keeps its own schema: its format did not change.
OEQ_BUILD_SCHEMA = 2
FILE_NAME = "manifest.json"
# Every key of the published 0.7.0.post1 manifest, which FastMACE 1.0.0 reads.
CONSUMER_KEYS = ("compiler", "cuda", "extension_version", "glibc_max_symbol", "library", "openequivariance",
                 "platform", "pybind11", "python", "sha256", "torch")
# post1's name -> the field that holds the same value.
ALIASES = {"extension_version": "version", "platform": "platform_tag", "python": "python_tag",
           "sha256": "library_sha256"}
# The binary openequivariance wheel records its build in its .dist-info under this name.
OEQ_BUILD_FILE = "oeq_wheels_build.json"


class ManifestError(ValueError):
    """The manifest is missing a field or a field has the wrong type."""


@dataclass(frozen=True)
class Input:
    """One pinned input file."""

    name: str
    version: str
    file: str
    sha256: str


@dataclass(frozen=True)
class Manifest:
    package: str                 # distribution name, e.g. fastmace-oeq-ext
    version: str                 # its version
    variant: str                 # the OpenEquivariance it is for: "pypi" (PyPI's release) or an OEq line (cu130)
    openequivariance: str        # that OEq's exact distribution version (FastMACE compares it exactly)
    torch: str                   # torch's exact distribution version in the install it is for (e.g. 2.14.1+cu130)
    torch_index: str             # where that torch comes from (FastMACE's README: PyTorch's cu130 index)
    oeq_version: str             # the OEq release whose sources it is built from
    oeq_sdist: Input
    torch_version: str           # release, e.g. 2.14.1
    torch_local: str             # local tag of the CUDA build, e.g. cu130
    cuda: str                    # e.g. 13.0
    cxx11_abi: int
    torch_git_version: str
    torch_wheel: Input
    python_tag: str              # e.g. cp311
    python_built_with: str       # e.g. 3.11.7
    platform_tag: str            # the wheel's platform tag, proven by auditwheel
    library: str                 # file name beside the manifest
    library_sha256: str
    glibc_max_symbol: str        # the newest GLIBC symbol version the library needs, e.g. GLIBC_2.14
    extension_name: str          # the name OEq asks torch.utils.cpp_extension.load for
    cuda_wheels: tuple[Input, ...]
    pybind11: str                # its version (post1's format)
    pybind11_wheel: Input
    compiler: str                # GCC <__VERSION__>, as post1 says it
    cxx_std: str
    flags: tuple[str, ...]
    matrix: str

    def to_json(self) -> str:
        data = {"schema": SCHEMA, **asdict(self), **{k: getattr(self, f) for k, f in ALIASES.items()}}
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        m = _from_json(cls, text)
        data = json.loads(text)
        for key, name in ALIASES.items():
            if data.get(key) != getattr(m, name):
                raise ManifestError(f"field {key!r} is {data.get(key)!r} but {name!r} is {getattr(m, name)!r}")
        return m

    def consumer_refusal(self, env: dict) -> str | None:
        """Why FastMACE 1.0.0 will not use this prebuilt here, in its own words; None when it will.

        Its rule (prebuilt_extension): the exact distribution versions of torch and OpenEquivariance,
        the CPython tag and Linux x86_64. env keys: torch_distribution, oeq_version, python_tag,
        system, machine. The tests hold this to FastMACE's own function.
        """
        if not (env.get("system") or "").lower().startswith("linux") or env.get("machine") not in ("x86_64", "AMD64"):
            return f"fastmace-oeq-ext is for Linux x86_64, not {env.get('system')} {env.get('machine')}"
        for key, have in (("torch", env.get("torch_distribution")), ("openequivariance", env.get("oeq_version")),
                          ("python", env.get("python_tag"))):
            if getattr(self, ALIASES.get(key, key)) != have:
                return f"fastmace-oeq-ext was built for {key} {getattr(self, ALIASES.get(key, key))}, installed is {have}"
        return None

    def mismatch(self, env: dict) -> str | None:
        """Why this build does not fit env, in one line; None when it does exactly.

        env keys: torch_version (version.py's, e.g. 2.14.1+cu130), torch_cuda,
        cxx11_abi (None until torch is imported), oeq_version, python_tag, system, machine.
        """
        tv = env.get("torch_version") or ""
        release, _, local = tv.partition("+")
        if release != self.torch_version:
            return f"torch {tv} installed, library built for torch {self.torch_version}"
        # PyPI's CUDA build says 2.14.1+cu130 in version.py while its distribution version
        # is plain 2.14.1: both are the same binary. The local tag must agree with cuda.
        if env.get("torch_cuda") != self.cuda:
            return f"torch is built for CUDA {env.get('torch_cuda')}, library for CUDA {self.cuda}"
        if local and local != self.torch_local:
            return f"torch {tv} is a {local} build, library built for {self.torch_local}"
        abi = env.get("cxx11_abi")
        if abi is not None and int(abi) != self.cxx11_abi:
            return f"torch uses C++11 ABI={abi}, library built with ABI={self.cxx11_abi}"
        if env.get("oeq_version") is None:
            return "openequivariance is not installed"
        # A local label (0.7.0+oeqwheels...) marks a binary rebuild of the same unmodified sources.
        if env["oeq_version"].split("+")[0] != self.oeq_version:
            return f"openequivariance {env['oeq_version']} installed, library built for {self.oeq_version}"
        if env.get("python_tag") != self.python_tag:
            return f"Python {env.get('python_tag')} running, library built for {self.python_tag}"
        if (env.get("system"), env.get("machine")) != ("Linux", "x86_64"):
            return f"platform {env.get('system')} {env.get('machine')}, library built for Linux x86_64"
        return None

    def requirement_pins(self) -> dict[str, str]:
        """NVIDIA wheel name -> pinned version (for the fallback's install hint)."""
        return {w.name: w.version for w in self.cuda_wheels}


@dataclass(frozen=True)
class FileHash:
    path: str        # inside the wheel
    sha256: str


@dataclass(frozen=True)
class OeqBuild:
    """How a binary openequivariance wheel's stable extension was built (its .dist-info/oeq_wheels_build.json)."""

    package: str                 # openequivariance
    version: str                 # e.g. 0.7.0+oeqwheels.cu13.1
    oeq_sdist: Input
    torch_min: str               # serves every CUDA 13 torch from this release on
    cuda_major: str
    built_against: Input         # the oldest supported torch wheel: its stable headers and libraries
    python_tag: str
    platform_tag: str
    files: tuple[FileHash, ...]  # the compiled libraries
    cuda_wheels: tuple[Input, ...]
    nanobind: Input
    compiler: str

    def to_json(self) -> str:
        return json.dumps({"schema": OEQ_BUILD_SCHEMA, **asdict(self)}, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "OeqBuild":
        return _from_json(cls, text, OEQ_BUILD_SCHEMA)

    def serves(self, torch_version: str | None, torch_cuda: str | None) -> str | None:
        """Why this build cannot serve the installed torch; None when it can."""
        if not torch_version:
            return "torch is not installed"
        try:
            release = tuple(int(x) for x in torch_version.split("+")[0].split(".")[:2])
            floor = tuple(int(x) for x in self.torch_min.split("."))
        except ValueError:
            return f"cannot read torch version {torch_version!r}"
        if release < floor:
            return f"built for torch >= {self.torch_min}, torch {torch_version} installed"
        if (torch_cuda or "").split(".")[0] != self.cuda_major:
            return f"built for CUDA {self.cuda_major}, torch {torch_version} is built for CUDA {torch_cuda}"
        return None


def _from_json(cls, text: str, schema: int = SCHEMA):
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ManifestError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ManifestError("not a JSON object")
    if data.get("schema") != schema:
        raise ManifestError(f"schema {data.get('schema')!r}, this runtime reads schema {schema}")
    values = {}
    for f in fields(cls):
        if f.name not in data:
            raise ManifestError(f"field {f.name!r} missing")
        values[f.name] = _typed(f.name, f.type, data[f.name])
    return cls(**values)


def _typed(name: str, kind: str, value):
    """Check one field against its annotation (a string, with `from __future__ import annotations`)."""
    if kind == "str":
        if not isinstance(value, str) or not value:
            raise ManifestError(f"field {name!r} must be a non-empty string, got {value!r}")
        return value
    if kind == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            raise ManifestError(f"field {name!r} must be an integer, got {value!r}")
        return value
    if kind in ("Input", "FileHash"):
        return _record(name, RECORDS[kind], value)
    if kind in ("tuple[Input, ...]", "tuple[FileHash, ...]"):
        if not isinstance(value, list):
            raise ManifestError(f"field {name!r} must be a list, got {value!r}")
        cls = RECORDS[kind[6:-6]]
        return tuple(_record(f"{name}[{i}]", cls, v) for i, v in enumerate(value))
    if kind == "tuple[str, ...]":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ManifestError(f"field {name!r} must be a list of strings, got {value!r}")
        return tuple(value)
    raise AssertionError(f"unhandled manifest field type {kind}")  # a bug here, not bad input


def _record(name: str, cls, value):
    if not isinstance(value, dict):
        raise ManifestError(f"field {name!r} must be an object, got {value!r}")
    try:
        return cls(**{f.name: _typed(f"{name}.{f.name}", f.type, value[f.name]) for f in fields(cls)})
    except KeyError as exc:
        raise ManifestError(f"field {name}.{exc.args[0]} missing") from None


RECORDS = {"Input": Input, "FileHash": FileHash}
