"""Load pins.toml: the versions and sha256 of every input, the build matrix, and the
names that follow from them (library file, link libraries, sonames, RUNPATH, tags)."""
from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from fastmace_oeq_ext import cudaflags

from . import addresses
from .errors import BuildRootError, PinsError

PINS_FILE = Path(__file__).with_name("pins.toml")
# The architecture whose files a pinned entry names at its top level ([nvidia."X"], a matrix's torch_wheels); each
# other architecture's are under the entry's arch.NAME table (arch_table). A line is built for it unless it says.
TOP_ARCH = "x86_64"


@dataclass(frozen=True)
class StubPin:
    """A library of a pinned wheel that the build links against a stub of (oeq_wheels/inputs/link_stubs.py)."""
    lib: str                       # its file name in the wheel (the soname, for NVIDIA's)
    digest: str                    # the digest of its dynamic-symbol view, from one full download
    tables: tuple[int, ...] = ()   # where its tables lie (link_stubs.Tables): only the member's first bytes are fetched


@dataclass(frozen=True)
class Pinned:
    """One downloadable file, pinned by name, version and sha256."""

    name: str
    version: str
    file: str
    sha256: str
    libs: tuple[str, ...] = ()
    # sha256 of the wheel's RECORD, taken from one full download when the pin was made (`oeq-wheels pins --records`):
    # with it the build fetches only the members it reads (oeq_wheels.inputs.members); without it, the whole wheel.
    record: str = ""
    # The libraries of this wheel the build links against a stub of (oeq_wheels/inputs/link_stub_store.py), from [stubs."FILE"].
    stubs: tuple["StubPin", ...] = ()
    url: str = ""      # where it is fetched from, when not from the Python index (a Debian package of the toolchain)

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Deb:
    """A Debian package of the build root ([toolchain.HOSTARCH] debs)."""
    name: str
    version: str
    file: str          # its path in the archive (pool/main/...)
    sha256: str


@dataclass(frozen=True)
class PinnedToolchain:
    """[toolchain]: the Debian release, its archive, what each target's compiler says of itself, the packages per
    build host (oeq_wheels/buildroot.py makes the root of them)."""
    debian: str
    archive: str
    compilers: dict[str, dict[str, str]]  # by the build host's Debian architecture, then target ([arch.NAME])
    debs: dict[str, tuple[Deb, ...]]      # by the build host's Debian architecture
    pythons: dict[str, tuple[str, str]]   # X.Y -> (X.Y.Z, digest of its C headers)
    pythons_host: str = "amd64"           # the build host's Debian architecture those headers are (pyconfig.h's)
    debian_arches: dict[str, str] = dataclasses.field(default_factory=dict)  # machine -> Debian's name ([arch.NAME])
    # by the build host's Debian architecture: the content digest of the root its debs make (buildroot.content_digest)
    roots: dict[str, str] = dataclasses.field(default_factory=dict)

    def host_of(self, debs: tuple[Deb, ...]) -> str | None:
        """The build host ([toolchain.HOST]) these packages are pinned for."""
        return next((h for h, d in self.debs.items() if d == debs), None)

    def debian_arch(self, machine: str) -> str:
        """Debian's name for a machine's architecture (x86_64: amd64), as [arch.NAME] debian_arch says."""
        return self.debian_arches.get(machine, machine)

    def compiler(self, machine: str, target: str) -> str | None:
        """What the root's compiler for `target` says of itself on a `machine` build host."""
        return self.compilers.get(self.debian_arch(machine), {}).get(target)

    def for_host(self, machine: str) -> tuple[Deb, ...]:
        arch = self.debian_arch(machine)
        if arch not in self.debs:
            raise BuildRootError(f"pins.toml pins no toolchain for a {machine} build host ([toolchain.{arch}]); "
                                 f"build on {' or '.join(k for k, v in self.debian_arches.items() if v in self.debs)}"
                                 ", or with --toolchain host (wheels that are not the released bytes)")
        return self.debs[arch]


@dataclass(frozen=True)
class Arch:
    """One CPU architecture ([arch.NAME] of pins.toml)."""

    name: str              # x86_64, aarch64: the machine name and the wheel tag's suffix
    platform_tag: str      # the target tag; the shipped tag is what auditwheel proves
    triplet: str           # CPython's EXT_SUFFIX: .cpython-312-<triplet>.so
    elf_machine: str       # e_machine of its ELF files, as pyelftools names it
    loader: str            # the dynamic loader every Linux system of it has (a NEEDED no wheel provides)
    cross_prefix: str      # Debian's cross toolchain for it: <prefix>g++, <prefix>strip, ...
    cross_package: str     # ... and the Debian package that brings it
    # The emulated load test, for an architecture this host is not: Debian's name for it, each CPython it runs
    # (X.Y -> the Debian release that ships it) and qemu's user-mode emulator of it.
    debian_arch: str = ""
    emulated_pythons: dict = dataclasses.field(default_factory=dict)
    qemu: str = ""
    # This host's own architecture: Debian's CPythons that no other installer here has (newer than the builds'),
    # X.Y -> {suite: the Debian release that ships it, torch: the torch releases the install matrix tries on it},
    # run natively in a root file system of that release through bubblewrap (oeq_wheels/checks/emulated.py).
    debian_pythons: dict = dataclasses.field(default_factory=dict)


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
    consumer_torch: str    # torch's distribution version in the install a build is for (FastMACE compares it)

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

    name: str                 # cu130, cu128: the line's name in keys and logs (its index: index_paths)
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
    arch: Arch                # one build of a line per architecture; they share its version and index
    abi3: str | None = None   # from this CPython on, one stable-ABI (cpXY-abi3) wheel serves every later one
    module_name: str = "oeq_stable_cuda"
    aoti_library: str = "liboeq_stable_cuda_aoti.so"
    torch_libs: tuple[str, ...] = ("torch_cpu", "c10")  # OEq's CMakeLists links CPU LibTorch only
    stub_library: str = "torch_cuda"   # OEq's stream stub, named like the library it stands in for
    # How the modules reach CUDA's runtime, NVRTC and cuBLAS: "linked" (NEEDED on the line's libcudart.so.N, ...,
    # found through RUNPATH in torch's NVIDIA wheels) or "dispatch" (our dispatch library, shipped beside them, binds
    # them at import to the CUDA libraries of the major torch loaded: oeq/dispatch/; one build serves CUDA 12 and 13)
    cuda_binding: str = "linked"
    dispatch_library: str = "liboeq_cuda_dispatch.so"
    index: str = ""                # the site's folder of its index (pins.toml `index`); default: <name>/simple
    also_at: tuple[str, ...] = ()  # more folders serving the same index (`also_at`: the URLs of lines it replaced)

    @property
    def index_paths(self) -> tuple[str, ...]:
        """Every folder of the site that serves this line's index, its own first."""
        return (self.index or f"{self.name}/simple", *self.also_at)

    @property
    def cuda_majors(self) -> tuple[str, ...]:
        """The CUDA majors of the torches it serves: its headers' alone, or with the dispatch library every one the
        library binds (oeq/dispatch/cuda_dispatch.c)."""
        return DISPATCH_MAJORS if self.dispatch else (self.cuda_major,)

    def serves_cuda(self, major: str) -> bool:
        return major in self.cuda_majors

    @property
    def dispatch(self) -> bool:
        return self.cuda_binding == "dispatch"

    @property
    def cuda_major(self) -> str:
        """The major of the CUDA headers it is compiled against (cuda_majors: those it serves)."""
        return self.cuda.split(".")[0]

    @property
    def key(self) -> str:
        """This build's name in logs and failures: the line and the architecture (cu130-aarch64)."""
        return f"{self.name}-{self.arch.name}"

    def free_threaded(self, python_version: str) -> bool:
        return free_threaded(python_version)

    def is_abi3(self, python_version: str) -> bool:
        """Whether this CPython's build is the stable-ABI one (nanobind's STABLE_ABI: Py_LIMITED_API 3.12)."""
        return python_version == self.abi3

    def abi_tag(self, python_version: str) -> str:
        """The wheel's ABI tag for this CPython's build: abi3, cpXY, or cpXYt (free-threaded)."""
        return "abi3" if self.is_abi3(python_version) else cp_tag(python_version)

    def ext_suffix(self, python_version: str) -> str:
        """The module's suffix as nanobind names it: .abi3.so for the stable-ABI build (nanobind_extension_abi3),
        else EXT_SUFFIX of a CPython of this architecture on Linux (nanobind_extension)."""
        if self.is_abi3(python_version):
            return ".abi3.so"
        return f".cpython-{python_version.replace('.', '')}-{self.arch.triplet}.so"

    def serves(self, python_version: str) -> bool:
        """Whether one of this line's wheels installs on this CPython (its own build, or the stable-ABI one, which a
        free-threaded CPython does not load: abi3 is the GIL builds' stable ABI)."""
        if python_version in self.pythons:
            return True
        return self.abi3 is not None and not free_threaded(python_version) and \
            python_key(python_version) >= python_key(self.abi3)

    def version(self, oeq_version: str) -> str:
        return f"{oeq_version}+{self.local_version}"

    def runpath(self) -> str:
        # openequivariance/_torch/extlib/ is three levels below site-packages. With the dispatch library: it, beside
        # the modules, and torch's libraries; no NVIDIA wheel's folder (it finds CUDA's libraries at import).
        return "$ORIGIN:$ORIGIN/../../../torch/lib" if self.dispatch else runpath(3, self.cuda_major)

    def cuda_sonames(self) -> tuple[str, ...]:
        return tuple(l for n in self.nvidia for l in n.libs)

    def inputs(self, oeq: Pinned) -> list[Pinned]:
        return [oeq, self.nanobind, self.torch, *self.nvidia]


@dataclass(frozen=True)
class Consumer:
    """The package fastmace-oeq-ext exists for, whose own code decides whether the prebuilt is used."""

    wheels: tuple[Pinned, ...]  # its wheel, then what its import needs; pure Python, pinned by sha256
    torch_index: str            # where its README installs torch from (PyTorch's index of torch_local)
    published: Pinned | None = None  # the owner's earlier fastmace-oeq-ext its users may have (the tests' baseline)

    @property
    def wheel(self) -> Pinned:
        return self.wheels[0]

    @property
    def label(self) -> str:
        return f"{self.wheel.name} {self.wheel.version}"


@dataclass(frozen=True)
class FreeThreaded:
    """A free-threaded CPython ([freethreaded."X.Yt"]): its pinned source, built here (inputs/freethreaded.py)."""

    version: str              # "3.14t"
    source: Pinned            # the CPython release's source tarball, fetched from its url
    torch: tuple[str, ...]    # PyPI's torch releases with a cpXYt wheel that the install matrix proves it on


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
    oeq_variants: tuple[str, ...]        # the OEqs fastmace-oeq-ext is built for: "pypi" and line names
    consumer: Consumer
    arches: dict[str, Arch]              # [arch.NAME]: x86_64 is fastmace-oeq-ext's (platform_tag)
    upstream: tuple[str, ...] = ()       # [addresses] upstream: URL prefixes of upstream projects and registries
    toolchain: "PinnedToolchain | None" = None  # [toolchain]: the build root's Debian packages
    freethreaded: dict[str, FreeThreaded] = dataclasses.field(default_factory=dict)  # [freethreaded."X.Yt"]

    def for_variant(self, variant: str) -> "ExtVariant":
        """The fastmace-oeq-ext build of these pins that names one OpenEquivariance ("pypi" or a line's)."""
        if variant not in self.oeq_variants:
            raise PinsError(f"no fastmace-oeq-ext variant {variant!r}; pins.toml's oeq_variants: "
                            f"{', '.join(self.oeq_variants)}")
        if variant != "pypi" and not self.oeq_line(variant).serves_cuda(self.matrix.cuda_major):
            raise PinsError(f"variant {variant!r} is an OEq line for CUDA "
                            f"{', '.join(self.oeq_line(variant).cuda_majors)}; matrix {self.matrix.name!r} builds for "
                            f"CUDA {self.matrix.cuda}")
        return ExtVariant(self, variant)

    @property
    def ext_variants(self) -> tuple["ExtVariant", ...]:
        """fastmace-oeq-ext's builds of each Python: PyPI's OEq first, then each line of this CUDA."""
        return tuple(self.for_variant(v) for v in self.oeq_variants
                     if v == "pypi" or self.oeq_line(v).serves_cuda(self.matrix.cuda_major))

    def oeq_line(self, name: str, arch: str = "x86_64") -> OeqLine:
        for line in self.oeq_lines:
            if line.name == name and line.arch.name == arch:
                return line
        raise PinsError(f"no OEq line {name!r} for {arch}; pins.toml builds: "
                        f"{', '.join(l.key for l in self.oeq_lines)}")

    @property
    def line_names(self) -> tuple[str, ...]:
        """Each OEq line once (an index of the site), newest CUDA first, whatever its architectures."""
        return tuple(dict.fromkeys(l.name for l in self.oeq_lines))

    def line_builds(self, name: str) -> tuple[OeqLine, ...]:
        """Every architecture's build of one line."""
        return tuple(l for l in self.oeq_lines if l.name == name)

    def line_of(self, version: str, arch: str | None = None, *, any_rebuild: bool = False) -> OeqLine | None:
        """The OEq line a wheel version is of: the line whose version it is, or with any_rebuild the line whose CUDA
        part its local label starts with (a rebuild bumps the label's last number, cu13.1 -> cu13.2: an earlier
        release's wheel, and a fastmace-oeq-ext build that names the line, are still of it). With arch, that
        architecture's build of the line, else its first (the index is the same)."""
        local = version.partition("+")[2]
        return next((l for l in self.oeq_lines if (arch is None or l.arch.name == arch) and (
            local.startswith(l.local_version.rsplit(".", 1)[0] + ".") if any_rebuild
            else version == l.version(self.oeq.version))), None)

    @property
    def oeq_binary(self) -> OeqLine:
        """The x86_64 OEq line of the release matrix's CUDA major (what fastmace-oeq-ext users install beside it)."""
        return next(l for l in self.oeq_lines if l.serves_cuda(self.matrix.cuda_major) and l.arch.name == "x86_64")

    @property
    def pythons(self) -> tuple[str, ...]:
        """Every CPython either package is built for."""
        every = {*self.matrix.pythons, *(v for l in self.oeq_lines for v in l.pythons)}
        return tuple(sorted(every, key=python_key))

    @property
    def site_url(self) -> str:
        """The GitHub Pages site of `repository`, which serves the binary OEq indexes."""
        owner, name = self.repository.split("/")
        return f"https://{owner.lower()}.github.io/{name}/"

    def index_url(self, line: str) -> str:
        """The URL of a line's index (its own folder of the site: OeqLine.index_paths), or of another index of the
        site by its name (the variant index's)."""
        builds = self.line_builds(line)
        return f"{self.site_url}{builds[0].index_paths[0] if builds else line + '/simple'}/"

    @property
    def project_urls(self) -> tuple[tuple[str, str], ...]:
        """Project-URL lines: this project's own (derived from `repository`), then pins.toml's."""
        own = (("Source", f"https://github.com/{self.repository}"), ("Binary index", self.site_url))
        # Each CUDA major's index, which the runtime names in its fixes (torch 2.15.0 is CUDA 13.2: the cu130 line):
        # the newest line that serves it (a dispatch line serves both majors); one URL per label, as METADATA allows.
        index: dict[str, str] = {}
        for n in self.line_names:
            for m in self.line_builds(n)[0].cuda_majors:
                index.setdefault(m, self.index_url(n))
        own += tuple((f"CUDA {m} index", url) for m, url in index.items())
        return own + self.urls

    @property
    def allowed_addresses(self) -> tuple[str, ...]:
        """The URL prefixes anything we ship or tell users may name: the owner's account, then upstream's."""
        return addresses.owner_prefixes(self.repository) + self.upstream

    @property
    def ext_arch(self) -> Arch:
        """fastmace-oeq-ext's architecture: that of its platform_tag (FastMACE 1.0.0 takes x86_64 only)."""
        return next(a for a in self.arches.values() if self.platform_tag.endswith("_" + a.name))

    @property
    def version(self) -> str:
        """fastmace-oeq-ext's version on PyPI (its "pypi" variant): ExtVariant.version."""
        return self.for_variant("pypi").version

    @property
    def library_file(self) -> str:
        return f"{self.oeq_extension_name}.so"

    @property
    def torch_needed(self) -> frozenset[str]:
        return frozenset(f"lib{l}.so" for l in self.torch_libs)

    @property
    def cuda_needed(self) -> frozenset[str]:
        """The CUDA libraries the prebuilt links by soname, and the driver."""
        return frozenset([*(l for n in self.matrix.nvidia for l in n.libs), cudaflags.DRIVER_SONAME])

    def runpath(self) -> str:
        # fastmace_oeq_ext/ sits directly in site-packages, beside torch/ and nvidia/.
        return runpath(1, self.matrix.cuda_major)

    def all_inputs(self, cp_tags: list[str]) -> list[Pinned]:
        """Every file a build of these Pythons reads, for download and provenance."""
        return ([self.oeq, self.pybind11, *self.matrix.nvidia, *self.consumer.wheels]
                + [self.matrix.torch_wheel(t) for t in cp_tags])

    def oeq_binary_inputs(self) -> list[Pinned]:
        """Every file the OEq lines read."""
        return list(dict.fromkeys(p for line in self.oeq_lines for p in line.inputs(self.oeq)))


@dataclass(frozen=True)
class ExtVariant:
    """One fastmace-oeq-ext build of the pins: the one that names PyPI's OpenEquivariance ("pypi") or the one that
    names a binary OEq line's (FastMACE 1.0.0 takes the prebuilt only beside the exact OEq its manifest names)."""

    pins: Pins
    name: str                            # "pypi" or a line name (cu130)

    @property
    def line(self) -> OeqLine | None:
        """The binary OEq line this build names (None: PyPI's OpenEquivariance)."""
        return None if self.name == "pypi" else self.pins.oeq_line(self.name)

    @property
    def oeq_exact(self) -> str:
        """The exact OpenEquivariance version its manifest names and its METADATA requires."""
        return self.line.version(self.pins.oeq.version) if self.line else self.pins.oeq.version

    @property
    def version(self) -> str:
        """The wheel version: the base version, plus local labels for a binary OEq line's build and for
        non-release matrices (0.7.0.post5+oeqwheels.cu13.1.torch2.11.0)."""
        labels = [l for l in ((self.line.local_version if self.line else None), self.pins.matrix.local_version) if l]
        return f"{self.pins.base_version}+{'.'.join(labels)}" if labels else self.pins.base_version


CUDA_BINDINGS = ("linked", "dispatch")  # [oeq_binary.lines.X] cuda_binding (OeqLine.cuda_binding)
DISPATCH_MAJORS = ("12", "13")  # the CUDA majors the dispatch library binds (oeq/dispatch/cuda_dispatch.c)


def runpath(depth: int, cuda_major: str) -> str:
    """RUNPATH from a library `depth` directories below site-packages to torch's and the NVIDIA wheels' libraries."""
    up = "/".join([".."] * depth)
    return ":".join(f"$ORIGIN/{up}/{d}" for d in ["torch/lib", *cudaflags.layout_lib_dirs(cuda_major)])


def cp_tag(version: str) -> str:
    """'3.12' -> 'cp312', '3.14t' -> 'cp314t' (a free-threaded CPython's ABI tag): the one place a CPython tag is
    made."""
    major, minor = version.split(".")
    return f"cp{major}{minor}"


def interpreter_tag(version: str) -> str:
    """A wheel's interpreter tag: 'cp314' for 3.14 and 3.14t alike (the ABI tag, cp_tag, tells them apart)."""
    return cp_tag(version.removesuffix("t"))


def free_threaded(version: str) -> bool:
    """'3.14t': a free-threaded CPython (PEP 703: built with --disable-gil, ABI tag cp314t)."""
    return version.endswith("t")


def python_key(version: str) -> tuple[int, int, int]:
    """Sorting order of CPython versions: 3.10 < 3.14 < 3.14t < 3.15."""
    major, minor = version.removesuffix("t").split(".")
    return int(major), int(minor), int(free_threaded(version))


def _pinned(name: str, version: str, entry: dict, data: dict | None = None) -> Pinned:
    return Pinned(name, version, entry["file"], entry["sha256"], tuple(entry.get("libs", ())), entry.get("record", ""),
                  _stub_pins(data or {}, entry["file"]))


def _stub_pins(data: dict, file: str) -> tuple[StubPin, ...]:
    """[stubs."FILE"]: each linked library's view digest (and table places), or nothing (the library is linked)."""
    out = []
    for lib, e in data.get("stubs", {}).get(file, {}).items():
        digest, tables = e.get("digest", ""), tuple(e.get("tables", ()))
        if not re.fullmatch(r"[0-9a-f]{64}", digest) or len(tables) not in (0, 8):
            raise PinsError(f'[stubs."{file}"] {lib} needs digest = 64 hex digits and optionally tables = 8 '
                            "integers; re-pin it with `oeq-wheels pins --records`")
        out.append(StubPin(lib, digest, tables))
    return tuple(out)


def arch_table(table, arch: str, *keys: str):
    """The part of a pins.toml table that pins `arch`'s files (a pinned NVIDIA wheel, a matrix): the table itself for
    TOP_ARCH, else its arch.ARCH table; then `keys` down from there. None where pins.toml has none. Of a tomlkit
    document too (repin writes through it)."""
    t = table if arch == TOP_ARCH else table.get("arch", {}).get(arch)
    for k in keys:
        t = None if t is None else t.get(k)
    return t


def _for_arch(entry: dict, arch: str, where: str) -> dict:
    """A pinned file's entry for one architecture: its own table, TOP_ARCH's at the top level."""
    if arch == TOP_ARCH:
        return entry
    own = arch_table(entry, arch)
    if own is None:
        raise PinsError(f"{where} pins no {arch} file; add its file and sha256 under {where[:-1]}.arch.{arch}]")
    # file, sha256 and record are the architecture's own (TOP_ARCH's record must not pass to another file)
    return {**{k: v for k, v in entry.items() if k != "record"}, **own}


def _nvidia(data: dict, refs: list[str], where: str, arch: str = TOP_ARCH) -> tuple[Pinned, ...]:
    table = data.get("nvidia", {})
    out = []
    for ref in refs:
        if ref not in table:
            raise PinsError(f"{where} names {ref!r}, which no [nvidia.\"{ref}\"] entry in pins.toml defines")
        name, _, version = ref.partition("==")
        out.append(_pinned(name, version, _for_arch(table[ref], arch, f'[nvidia."{ref}"]'), data))
    return tuple(out)


def _arches(data: dict) -> dict[str, Arch]:
    out = {}
    for name, a in data.get("arch", {}).items():
        try:
            out[name] = Arch(name=name, **a)
        except TypeError as exc:
            raise PinsError(f"[arch.{name}] in pins.toml: {exc}") from None
    if TOP_ARCH not in out:
        raise PinsError(f"pins.toml defines no [arch.{TOP_ARCH}]")
    return out


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
    variants = tuple(pkg.get("oeq_variants", ["pypi"]))
    unknown = [v for v in variants if v != "pypi" and v not in ob["lines"]]
    if unknown or "pypi" not in variants:
        raise PinsError(f"[package] oeq_variants = {list(variants)} in {path}: each must be \"pypi\" or an "
                        f"[oeq_binary.lines] name ({', '.join(ob['lines'])}), and \"pypi\" must be one")
    upstream = tuple(data.get("addresses", {}).get("upstream", ()))
    bad = addresses.foreign("\n".join(pkg.get("urls", {}).values()), addresses.owner_prefixes(repository) + upstream)
    if bad:
        raise PinsError(f"[package.urls] in {path} names {bad[0]}, which is neither the owner's account "
                        f"({repository.split('/')[0]}) nor an [addresses] upstream; point it at one of those")
    con = data["consumer"]
    consumer = Consumer(tuple(_pinned(w["name"], w["version"], w) for w in con["wheels"]),
                        f"{con['torch_indexes'].rstrip('/')}/{mat.torch_local}",
                        _pinned(con["published"]["name"], con["published"]["version"], con["published"])
                        if "published" in con else None)
    nb = data["nanobind"]
    nanobind = Pinned("nanobind", nb["version"], nb["file"], nb["sha256"])
    arches = _arches(data)
    abi3 = ob.get("abi3")
    gil = [v for v in ob["pythons"] if not free_threaded(v)]
    if abi3 is not None and (abi3 != gil[-1] or python_key(abi3) < (3, 12, 0)):
        raise PinsError(f"[oeq_binary] abi3 = {abi3!r}: the stable-ABI build must be the last of its GIL pythons "
                        f"({', '.join(gil)}), 3.12 or later (nanobind's linked stable ABI needs 3.12)")
    unbuilt = [v for v in ob["pythons"] if free_threaded(v) and v not in (data.get("freethreaded") or {})]
    if unbuilt:
        raise PinsError(f"[oeq_binary] pythons names free-threaded CPython {', '.join(unbuilt)}, which pins.toml "
                        "does not pin the source of ([freethreaded.\"X.Yt\"])")
    lines = []
    for line_name, line_table in ob["lines"].items():
        binding = line_table.get("cuda_binding", "linked")
        if binding not in CUDA_BINDINGS:
            raise PinsError(f"[oeq_binary.lines.{line_name}] cuda_binding = {binding!r}: one of "
                            f"{', '.join(CUDA_BINDINGS)}")
        for arch_name in line_table.get("arches", [TOP_ARCH]):
            if arch_name not in arches:
                raise PinsError(f"[oeq_binary.lines.{line_name}] arches names {arch_name!r}; pins.toml defines "
                                f"[arch.NAME] for: {', '.join(arches)}")
        unbuilt = sorted(set(line_table.get("arch", {})) - set(line_table.get("arches", [TOP_ARCH])))
        if unbuilt:
            raise PinsError(f"[oeq_binary.lines.{line_name}.arch.{unbuilt[0]}]: the line's arches do not name "
                            f"{unbuilt[0]}; add it there or remove the table")
        for arch_name in line_table.get("arches", [TOP_ARCH]):
            # [oeq_binary.lines.X.arch.NAME]: what that architecture's build reads instead of the line's (its torch
            # and CUDA headers: PyPI's oldest CUDA torch may differ by architecture)
            override = line_table.get("arch", {}).get(arch_name, {})
            ln = {**{k: v for k, v in line_table.items() if k != "arch"}, **override}
            where = f"[oeq_binary.lines.{line_name}" + (f".arch.{arch_name}]" if override else "]")
            tm = _matrix(data, ln["torch_matrix"])
            if tm.cuda != ln["cuda"]:
                raise PinsError(f"{where} says CUDA {ln['cuda']}, its torch matrix {tm.name!r} CUDA {tm.cuda}")
            torch_wheels = _torch_wheels(data, tm.name, arch_name)
            if ln["torch_wheel"] not in torch_wheels:
                raise PinsError(f"{where} builds against torch's {ln['torch_wheel']} wheel, which "
                                f"[matrix.{tm.name!r}] does not pin for {arch_name}")
            lines.append(OeqLine(
                name=line_name, local_version=ln["local_version"], pythons=tuple(ob["pythons"]), abi3=abi3,
                torch=torch_wheels[ln["torch_wheel"]], torch_local=tm.torch_local, torch_matrix=tm.name,
                torch_min=ln["torch_min"], cuda=ln["cuda"], driver=ln["driver"],
                nvidia=_nvidia(data, ln["nvidia"], where, arch_name), nanobind=nanobind,
                tested_torch=tuple(ln["tested_torch"]), arch=arches[arch_name], cuda_binding=binding,
                index=ln.get("index", ""), also_at=tuple(ln.get("also_at", ()))))
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
        # newest CUDA first (a line's own, not an architecture table's); within a line, the pins' order of
        # architectures (x86_64 first: line_builds(name)[0])
        oeq_lines=tuple(sorted(lines, key=lambda l: tuple(int(x) for x in ob["lines"][l.name]["cuda"].split(".")),
                               reverse=True)),
        oeq_variants=variants,
        consumer=consumer,
        arches=arches,
        upstream=upstream,
        toolchain=_toolchain(data, arches),
        freethreaded={v: FreeThreaded(v, Pinned("cpython", f["version"], f["file"], f["sha256"], url=f["url"]),
                                      tuple(f["torch"])) for v, f in data.get("freethreaded", {}).items()},
    )


def _toolchain(data: dict, arches: dict[str, Arch]) -> PinnedToolchain:
    t = data["toolchain"]
    hosts = {k: v for k, v in t.items() if isinstance(v, dict) and "debs" in v}
    debs = {k: tuple(Deb(d["name"], d["version"], d["file"], d["sha256"]) for d in v["debs"])
            for k, v in hosts.items()}
    pythons = {v: (p["version"], p["headers"]) for v, p in t.get("pythons", {}).items()}
    return PinnedToolchain(t["debian"], t["archive"], {k: dict(v["compilers"]) for k, v in hosts.items()}, debs,
                           pythons, t.get("pythons_host", "amd64"),
                           {n: a.debian_arch for n, a in arches.items() if a.debian_arch},
                           {k: v["root"] for k, v in hosts.items() if "root" in v})


def _torch_wheels(data: dict, name: str, arch: str = TOP_ARCH) -> dict[str, Pinned]:
    """A matrix's torch wheels for one architecture, keyed by CPython tag."""
    m = data["matrix"][name]
    wheels = arch_table(m, arch, "torch_wheels")
    if wheels is None:
        raise PinsError(f"[matrix.{name!r}] pins no {arch} torch wheel; add [matrix.\"{name}\".arch.{arch}.torch_wheels]")
    return {tag: Pinned("torch", m["torch_version"], w["file"], w["sha256"], (), w.get("record", ""),
                        _stub_pins(data, w["file"]))
            for tag, w in wheels.items()}


def _matrix(data: dict, name: str) -> Matrix:
    m = data["matrix"][name]
    return Matrix(
        name=name,
        pythons=tuple(m["pythons"]),
        torch_version=m["torch_version"],
        torch_local=m["torch_local"],
        cuda=m["cuda"],
        torch_wheels=_torch_wheels(data, name),
        nvidia=_nvidia(data, m["nvidia"], f"[matrix.{name!r}]"),
        local_version=m.get("local_version"),
        consumer_torch=m.get("consumer_torch", f"{m['torch_version']}+{m['torch_local']}"),
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
