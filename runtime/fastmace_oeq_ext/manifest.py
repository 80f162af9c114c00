"""manifest.json: fastmace-oeq-ext's record of its build, which the build writes, the gate checks and the runtime
reads. Standard library only (it ships in the wheel).

One name per fact (schema 4). FastMACE reads the same file (fastmace.kernels._oeq_runtime.prebuilt_extension)
and knows the keys of 0.7.0.post1's manifest only (CONSUMER_KEYS), so those facts are stored under post1's
names. What follows from another field is derived on read (DERIVED) and never stored, except `pybind11`, a
key FastMACE reads: it is written from pybind11_wheel and must agree with it when read. Schema 3 (post4 as
built) stored each of those twice; it is still read, and its twins must agree.

`Manifest.from_json` refuses any malformed or disagreeing field with a ManifestError that names it, so a
damaged manifest is a reason, never a crash. What a manifest means for an environment is decision.py's.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

SCHEMA = 4
READS = (3, 4)
FILE_NAME = "manifest.json"
# Every key of the published 0.7.0.post1 manifest, which FastMACE 1.0.0 reads.
CONSUMER_KEYS = ("compiler", "cuda", "extension_version", "glibc_max_symbol", "library", "openequivariance",
                 "platform", "pybind11", "python", "sha256", "torch")
# Read from the fields below, never stored (except `pybind11`, which post1's readers look up).
DERIVED = ("oeq_version", "torch_version", "torch_local", "pybind11", "extension_name", "cxx_std", "cxx11_abi")
# Schema 3's second names of four facts that schema 4 keeps under post1's name only.
SCHEMA3_TWINS = {"version": "extension_version", "platform_tag": "platform", "python_tag": "python",
                 "library_sha256": "sha256"}
ABI_FLAG, STD_FLAG, NAME_FLAG = "-D_GLIBCXX_USE_CXX11_ABI=", "-std=", "-DTORCH_EXTENSION_NAME="
# A manifest is a few KB: anything longer is damaged, and a reader stops one byte past this.
MAX_BYTES = 1 << 20


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
    package: str                 # distribution name, fastmace-oeq-ext
    extension_version: str       # its version
    variant: str                 # the OpenEquivariance it is for: "pypi" (PyPI's release) or an OEq line (cu130)
    openequivariance: str        # that OEq's exact distribution version (FastMACE compares it exactly)
    torch: str                   # torch's exact distribution version in the install it is for (e.g. 2.14.1+cu130)
    torch_index: str             # where that torch comes from (FastMACE's README: PyTorch's index of torch_local)
    oeq_sdist: Input             # the OEq release whose sources it is built from
    cuda: str                    # e.g. 13.0
    torch_git_version: str
    torch_wheel: Input           # the torch wheel it is built against
    python: str                  # the CPython tag, e.g. cp311
    python_built_with: str       # e.g. 3.11.7
    platform: str                # the wheel's platform tag, proven by auditwheel
    library: str                 # file name beside the manifest
    sha256: str                  # the library's
    glibc_max_symbol: str        # the newest GLIBC symbol version the library needs, e.g. GLIBC_2.14
    cuda_wheels: tuple[Input, ...]
    pybind11_wheel: Input
    compiler: str                # GCC <__VERSION__>, as post1 says it
    flags: tuple[str, ...]       # the compile command's flags, build paths neutral
    matrix: str                  # the pins' matrix it was built from

    # ---- derived facts: each has one source above
    @property
    def oeq_version(self) -> str:
        return self.oeq_sdist.version

    @property
    def torch_version(self) -> str:
        return self.torch_wheel.version

    @property
    def torch_local(self) -> str:
        """The +label of torch's CUDA build (cu130 for CUDA 13.0), as torch/version.py says it."""
        return "cu" + self.cuda.replace(".", "")

    @property
    def pybind11(self) -> str:
        return self.pybind11_wheel.version

    @property
    def extension_name(self) -> str:
        """The name OEq asks torch.utils.cpp_extension.load for."""
        return self.library.removesuffix(".so")

    @property
    def cxx_std(self) -> str:
        return self._flag(STD_FLAG)

    @property
    def cxx11_abi(self) -> int:
        value = self._flag(ABI_FLAG)
        if value not in ("0", "1"):
            raise ManifestError(f"field 'flags' says {ABI_FLAG}{value}, expected 0 or 1")
        return int(value)

    def _flag(self, prefix: str) -> str:
        values = [f[len(prefix):] for f in self.flags if f.startswith(prefix)]
        if len(values) != 1:
            raise ManifestError(f"field 'flags' must hold one {prefix}..., has {len(values)}")
        return values[0]

    def requirement_pins(self) -> dict[str, str]:
        """NVIDIA wheel name -> pinned version (for the fallback's install hint)."""
        return {w.name: w.version for w in self.cuda_wheels}

    def compiler_record(self) -> str:
        """BUILD_COMPILER.txt, the file post1 shipped beside the library: the compiler and its flags."""
        return f"{self.compiler}\nflags: {' '.join(self.flags)}\n"

    def to_json(self) -> str:
        return json.dumps({"schema": SCHEMA, **asdict(self), "pybind11": self.pybind11}, indent=2,
                          sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> "Manifest":
        data = json_object(text)
        schema = data.get("schema")
        if schema not in READS:
            raise ManifestError(f"schema {_shown(schema)}, this runtime reads schemas {READS[0]} to {READS[-1]}")
        written = {"schema", "pybind11", *(f.name for f in fields(cls))}
        if schema == 3:
            written |= {*DERIVED, *SCHEMA3_TWINS}
        extra = sorted(set(data) - written)
        if extra:
            raise ManifestError(f"field {_shown(extra[0])} is not in schema {schema}")
        m = cls(**typed_fields(cls, data))
        twins = {"pybind11": m.pybind11}
        if schema == 3:
            twins.update({k: getattr(m, k) for k in DERIVED})
            twins.update({old: getattr(m, new) for old, new in SCHEMA3_TWINS.items()})
        for key, value in twins.items():
            if data.get(key) != value:
                raise ManifestError(f"field {key!r} is {_shown(data.get(key))} but the manifest's other fields say "
                                    f"{_shown(value)}")
        m.check_consistent()
        return m

    def check_consistent(self) -> None:
        """Facts told in two fields that are not copies of each other must agree."""
        release, plus, local = self.torch.partition("+")
        if release != self.torch_version:
            raise ManifestError(f"field 'torch' is {self.torch!r} but torch_wheel is {self.torch_version}")
        if plus and local != self.torch_local:
            raise ManifestError(f"field 'torch' is {self.torch!r} but CUDA {self.cuda} is {self.torch_local}")
        if not self.python.startswith("cp") or self.python[2:] != "".join(self.python_built_with.split(".")[:2]):
            raise ManifestError(f"field 'python' is {self.python!r} but python_built_with is {self.python_built_with}")
        if self._flag(NAME_FLAG) != self.extension_name:
            raise ManifestError(f"field 'flags' names {self._flag(NAME_FLAG)!r} but library is {self.library!r}")
        if self.torch_index.rstrip("/").rsplit("/", 1)[-1] != self.torch_local:
            raise ManifestError(f"field 'torch_index' is {self.torch_index!r} but CUDA {self.cuda} is {self.torch_local}")
        if not self.cxx_std or self.cxx11_abi not in (0, 1):  # each told once in flags; the reads check them
            raise ManifestError("field 'flags' has no C++ standard")


def json_object(text: str | bytes) -> dict:
    """The JSON object in text (bytes: UTF-8); whatever else it holds is one ManifestError."""
    if len(text) > MAX_BYTES:
        raise ManifestError(f"longer than {MAX_BYTES >> 20} MiB (a manifest is a few KB): damaged or not a manifest")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ManifestError(f"not UTF-8 text (byte {text[exc.start]:#04x} at offset {exc.start})") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise ManifestError("JSON nested too deep to be a manifest") from None
    except ValueError as exc:  # also an integer of too many digits
        raise ManifestError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ManifestError("not a JSON object")
    return data


def typed_fields(cls, data: dict, records: tuple[type, ...] = (Input,)) -> dict:
    """The dataclass's fields from data, each checked against its annotation; `records`: the record types (frozen
    dataclasses) a field may hold, by their names in the annotations."""
    known = {r.__name__: r for r in records}
    values = {}
    for f in fields(cls):
        if f.name not in data:
            raise ManifestError(f"field {f.name!r} missing")
        values[f.name] = _typed(f.name, f.type, data[f.name], known)
    return values


def _typed(name: str, kind: str, value, records: dict[str, type]):
    """Check one field against its annotation (a string, with `from __future__ import annotations`)."""
    if kind == "str":
        # Printable: every field is told on one line, and a NUL or lone surrogate would fail a path or a print.
        if not isinstance(value, str) or not value or not value.isprintable():
            raise ManifestError(f"field {name!r} must be a non-empty printable string, got {_shown(value)}")
        return value
    if kind == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            raise ManifestError(f"field {name!r} must be an integer, got {_shown(value)}")
        return value
    if kind in records:
        return _record(name, records[kind], value, records)
    if kind.startswith("tuple[") and kind[6:-6] in records:
        if not isinstance(value, list):
            raise ManifestError(f"field {name!r} must be a list, got {_shown(value)}")
        cls = records[kind[6:-6]]
        return tuple(_record(f"{name}[{i}]", cls, v, records) for i, v in enumerate(value))
    if kind == "tuple[str, ...]":
        if not isinstance(value, list) or not all(isinstance(v, str) and v.isprintable() for v in value):
            raise ManifestError(f"field {name!r} must be a list of printable strings, got {_shown(value)}")
        return tuple(value)
    raise AssertionError(f"unhandled manifest field type {kind}")  # a bug here, not bad input


def _record(name: str, cls, value, records: dict[str, type]):
    if not isinstance(value, dict):
        raise ManifestError(f"field {name!r} must be an object, got {_shown(value)}")
    try:
        return cls(**{f.name: _typed(f"{name}.{f.name}", f.type, value[f.name], records) for f in fields(cls)})
    except KeyError as exc:
        raise ManifestError(f"field {name}.{exc.args[0]} missing") from None


def _shown(value) -> str:
    """A value as an error message quotes it: cut short, since a damaged field may be a megabyte or nested deep."""
    try:
        text = repr(value)
    except RecursionError:
        return f"a {type(value).__name__} nested too deep"
    return text if len(text) <= 60 else text[:57] + "..."
