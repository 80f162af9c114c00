"""The one decision: how OpenEquivariance's host extension is provided here.

activate(), status() and the doctor all call resolve(). Every candidate is
considered in order and keeps the reason it was taken or refused, like a
resolver trace:

1. oeq-precompiled  OEq's own stable-ABI extension (a binary openequivariance wheel)
2. prebuilt         this wheel's library, on an exact torch/CUDA/OEq/CPython match
3. nvidia-wheels    OEq's JIT build against the pip NVIDIA wheels (no toolkit)
4. host-toolchain   OEq's JIT build with torch's CUDA_HOME

Facts are read from files (torch's version.py, the distributions' metadata);
neither torch nor OEq is imported here.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
import shutil
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from . import cudaflags
from .manifest import FILE_NAME, MAX_BYTES, Manifest, ManifestError
from .oeq_build import FILE_NAME as OEQ_BUILD_FILE, OeqBuild

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / FILE_NAME
ENV_PREBUILT = "FASTMACE_OEQ_PREBUILT"
ENV_FROM_WHEELS = "OEQ_CUDA_FROM_WHEELS"
# OEq 0.7.0 loads its stable extension instead of any JIT build when this file sits in its extlib/.
OEQ_STABLE_MARKER = "liboeq_stable_cuda_aoti.so"
OEQ_STABLE_MIN_TORCH = (2, 10)


@dataclass(frozen=True)
class Decision:
    """check()'s answer: is the prebuilt library usable here, and why (one line)."""

    usable: bool
    reason: str
    library: str | None   # path of the prebuilt library when usable

    def __bool__(self) -> bool:
        return self.usable


@dataclass(frozen=True)
class Candidate:
    name: str             # oeq-precompiled, prebuilt, nvidia-wheels, host-toolchain
    taken: bool
    reason: str
    path: str | None = None


@dataclass
class Resolution:
    mode: str                                   # auto, require (=1) or never (=0)
    candidates: list[Candidate] = field(default_factory=list)
    error: str | None = None                    # set when nothing may be used (e.g. =1 unmet)
    flags: cudaflags.CudaWheelFlags | None = None

    @property
    def chosen(self) -> Candidate | None:
        return next((c for c in self.candidates if c.taken), None)

    def reason(self, name: str) -> str | None:
        """Why the candidate of that name was taken or refused; None when it was not considered."""
        return next((c.reason for c in self.candidates if c.name == name), None)

    def refusals(self) -> str:
        return "; ".join(f"{c.name}: {c.reason}" for c in self.candidates if not c.taken)


def prebuilt_mode(environ=None) -> str:
    environ = os.environ if environ is None else environ
    val = environ.get(ENV_PREBUILT, "")
    if val not in ("", "0", "1"):
        raise ValueError(f"{ENV_PREBUILT}={val!r}: use 1 (require the prebuilt), 0 (never use it) or leave it unset")
    return {"": "auto", "0": "never", "1": "require"}[val]


# ---------------------------------------------------------------- facts
def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def torch_build() -> dict | None:
    """torch's version.py fields and site-packages, read as text (importing torch costs seconds)."""
    try:
        files = metadata.distribution("torch").files or []
    except metadata.PackageNotFoundError:
        return None
    for f in files:
        if str(f).replace("\\", "/") == "torch/version.py":
            path = Path(f.locate())
            out = {"site": str(path.parent.parent)}
            try:
                text = path.read_text()
            except OSError:
                return None
            for line in text.splitlines():
                for key in ("__version__", "cuda", "hip", "git_version"):
                    if line.startswith(key) and "=" in line:
                        val = line.split("=", 1)[1].strip()
                        out[key] = val.strip("'\"") if val != "None" else None
            return out
    return None


def _torch_cxx11_abi() -> int | None:
    """The C++ ABI torch was built with: only known once torch is imported."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return int(bool(torch._C._GLIBCXX_USE_CXX11_ABI))


def _oeq_extlib() -> Path | None:
    """openequivariance/_torch/extlib, found without importing OEq."""
    try:
        spec = importlib.util.find_spec("openequivariance")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent / "_torch" / "extlib"


def _oeq_build_record() -> str | bytes | None:
    """The build record of a binary openequivariance wheel of ours (its CUDA line), as text; None if none."""
    try:
        return metadata.distribution("openequivariance").read_text(OEQ_BUILD_FILE)
    except (metadata.PackageNotFoundError, OSError):
        return None
    except UnicodeDecodeError as exc:  # a damaged record: its bytes, which OeqBuild.from_json refuses as not UTF-8
        return exc.object


def _project_urls() -> dict[str, str]:
    """fastmace-oeq-ext's Project-URLs, label -> URL (empty when it is not installed)."""
    try:
        urls = metadata.metadata("fastmace-oeq-ext").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        return {}
    return {label.strip(): url.strip() for label, _, url in (u.partition(",") for u in urls)}


def binary_index_url() -> str | None:
    """The binary OEq site, from fastmace-oeq-ext's Project-URL "Binary index" (None when not installed)."""
    return _project_urls().get("Binary index")


def index_for_cuda(torch_cuda: str | None, site: str | None = None) -> str | None:
    """Our index that serves a torch of this CUDA version: the Project-URL "CUDA <major> index" (one line per CUDA
    major: torch 2.15.0's CUDA 13.2 is the cu130 line's); from older wheels without it, the site's cu<major><minor>
    (`site` where fastmace-oeq-ext names none)."""
    parts = (torch_cuda or "").split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        return None
    urls = _project_urls()
    site = urls.get("Binary index") or site
    return urls.get(f"CUDA {parts[0]} index") or (f"{site}cu{parts[0]}{parts[1]}/simple/" if site else None)


def _line_mismatch(env: dict) -> str | None:
    """Why the installed binary OEq cannot serve this torch (its CUDA line or torch floor); None if it can."""
    text = env.get("oeq_build")
    if not text or not env.get("torch_version"):
        return None
    try:
        record = OeqBuild.from_json(text)
    except ManifestError as exc:
        return f"its build record is unreadable: {exc}"
    why = record.serves(env.get("torch_version"), env.get("torch_cuda"))
    if why is None:
        return None
    index = index_for_cuda(env.get("torch_cuda"), "<the binary index>/")
    fix = (f"; install the build for torch's CUDA: pip install --force-reinstall --no-deps "
           f"openequivariance=={record.version.split('+')[0]} --extra-index-url {index}") if index else ""
    return f"openequivariance {record.version} is {why}{fix}"


def cuda_home_guess(environ=None) -> str | None:
    """Where torch.utils.cpp_extension will look for CUDA, by its own rules (env, nvcc on PATH, /usr/local/cuda)."""
    environ = os.environ if environ is None else environ
    home = environ.get("CUDA_HOME") or environ.get("CUDA_PATH")
    if not home:
        nvcc = shutil.which("nvcc", path=environ.get("PATH"))
        home = str(Path(nvcc).resolve().parent.parent) if nvcc else None
    if not home and Path("/usr/local/cuda").exists():
        home = "/usr/local/cuda"
    return home


def has_cuda_headers(home: str) -> bool:
    return (Path(home) / "include" / "cuda_runtime_api.h").is_file()


def environment(environ=None) -> dict:
    """Every fact the decision needs, read without importing torch or OEq."""
    environ = os.environ if environ is None else environ
    build = torch_build() or {}
    cuda_home = cuda_home_guess(environ)
    return {
        "torch_version": build.get("__version__"), "torch_cuda": build.get("cuda"), "torch_hip": build.get("hip"),
        "torch_distribution": _dist_version("torch"),
        "torch_site": build.get("site"), "cxx11_abi": _torch_cxx11_abi(),
        "oeq_version": _dist_version("openequivariance"), "oeq_extlib": _oeq_extlib(),
        "oeq_build": _oeq_build_record(),
        "oeq_jit_forced": environ.get("OEQ_JIT_EXTENSION", "0") == "1",
        "python_tag": f"cp{sys.version_info[0]}{sys.version_info[1]}",
        "system": platform.system(), "machine": platform.machine(),
        "cuda_home": cuda_home,
        "cuda_home_usable": bool(cuda_home) and has_cuda_headers(cuda_home),
        "tools": {t: shutil.which(t, path=environ.get("PATH")) for t in ("g++", "ninja")},
        "from_wheels": environ.get(ENV_FROM_WHEELS, "auto"),
    }


# ---------------------------------------------------------------- the prebuilt
def load_manifest(path: Path = MANIFEST) -> Manifest:
    """The manifest at path; ManifestError for any content that is not one (OSError where it cannot be read)."""
    with path.open("rb") as f:  # never more than a byte past the cap, which from_json refuses
        return Manifest.from_json(f.read(MAX_BYTES + 1))


def prebuilt_mismatch(m: Manifest, env: dict) -> str | None:
    """Why the build m records does not fit env, in one line; None when it does exactly.

    env keys: torch_version (version.py's, e.g. 2.14.1+cu130), torch_cuda,
    cxx11_abi (None until torch is imported), oeq_version, python_tag, system, machine.
    """
    tv = env.get("torch_version") or ""
    release, _, local = tv.partition("+")
    if release != m.torch_version:
        return f"torch {tv} installed, library built for torch {m.torch_version}"
    # PyPI's CUDA build says 2.14.1+cu130 in version.py while its distribution version
    # is plain 2.14.1: both are the same binary. The local tag must agree with cuda.
    if env.get("torch_cuda") != m.cuda:
        return f"torch is built for CUDA {env.get('torch_cuda')}, library for CUDA {m.cuda}"
    if local and local != m.torch_local:
        return f"torch {tv} is a {local} build, library built for {m.torch_local}"
    abi = env.get("cxx11_abi")
    if abi is not None and int(abi) != m.cxx11_abi:
        return f"torch uses C++11 ABI={abi}, library built with ABI={m.cxx11_abi}"
    if env.get("oeq_version") is None:
        return "openequivariance is not installed"
    # A local label (0.7.0+oeqwheels...) marks a binary rebuild of the same unmodified sources.
    if env["oeq_version"].split("+")[0] != m.oeq_version:
        return f"openequivariance {env['oeq_version']} installed, library built for {m.oeq_version}"
    if env.get("python_tag") != m.python:
        return f"Python {env.get('python_tag')} running, library built for {m.python}"
    if (env.get("system"), env.get("machine")) != ("Linux", "x86_64"):
        return f"platform {env.get('system')} {env.get('machine')}, library built for Linux x86_64"
    return None


def consumer_refusal(m: Manifest, env: dict) -> str | None:
    """Why FastMACE 1.0.0 will not use the prebuilt m records here, in its own words; None when it will.

    Its rule (prebuilt_extension): the exact distribution versions of torch and OpenEquivariance,
    the CPython tag and Linux x86_64. env keys: torch_distribution, oeq_version, python_tag,
    system, machine. The tests hold this to FastMACE's own function.
    """
    if not (env.get("system") or "").lower().startswith("linux") or env.get("machine") not in ("x86_64", "AMD64"):
        return f"fastmace-oeq-ext is for Linux x86_64, not {env.get('system')} {env.get('machine')}"
    for key, have in (("torch", env.get("torch_distribution")), ("openequivariance", env.get("oeq_version")),
                      ("python", env.get("python_tag"))):
        if getattr(m, key) != have:
            return f"fastmace-oeq-ext was built for {key} {getattr(m, key)}, installed is {have}"
    return None


def check(manifest_path: Path | None = None, environment: dict | None = None) -> Decision:
    """Does the prebuilt library match this environment exactly? Returns the decision and why.

    environment (for tests and callers that already know): keys torch_version,
    torch_cuda, cxx11_abi, oeq_version, python_tag, system, machine.
    """
    path = manifest_path or MANIFEST
    try:
        m = load_manifest(path)
    except FileNotFoundError:
        return Decision(False, f"manifest missing: {path}", None)
    except (OSError, ManifestError) as exc:
        return Decision(False, f"manifest unreadable ({path}): {exc}", None)
    env = dict(environment or {})
    if "torch_version" not in env:
        build = torch_build()
        if build is None:
            return Decision(False, "torch is not installed", None)
        env.update(torch_version=build.get("__version__"), torch_cuda=build.get("cuda"))
    env.setdefault("cxx11_abi", _torch_cxx11_abi())
    env.setdefault("oeq_version", _dist_version("openequivariance"))
    env.setdefault("python_tag", f"cp{sys.version_info[0]}{sys.version_info[1]}")
    env.setdefault("system", platform.system())
    env.setdefault("machine", platform.machine())
    why = prebuilt_mismatch(m, env)
    if why:
        return Decision(False, why, None)
    so = path.parent / m.library
    try:  # a name too long for the file system is an OSError of is_file() itself
        if so.parent != path.parent or not so.is_file():
            return Decision(False, f"library missing: {so}", None)
        digest = hashlib.sha256(so.read_bytes()).hexdigest()
    except OSError as exc:
        return Decision(False, f"library unreadable: {exc.strerror or exc}", None)
    if digest != m.sha256:
        return Decision(False, f"library {so.name} sha256 {digest[:12]}... differs from the manifest's "
                               f"{m.sha256[:12]}... (damaged or replaced)", None)
    return Decision(True, f"matches torch {env['torch_version']}, openequivariance {m.oeq_version}, "
                          f"{m.python}, Linux x86_64", str(so))


# ---------------------------------------------------------------- the consumer
@dataclass(frozen=True)
class ConsumerVerdict:
    """What FastMACE will do with this prebuilt: use it, or not (why, and the command that fixes it)."""

    consumer: str         # e.g. "FastMACE 1.0.0"
    uses: bool
    reason: str | None
    fix: str | None

    def line(self) -> str:
        if self.uses:
            return f"{self.consumer}: uses this prebuilt; no compiler needed"
        return f"{self.consumer}: will not use this prebuilt: {self.reason}; instead: {self.fix}"


def _fastmace_own(environ) -> tuple[bool, str | None] | None:
    """FastMACE's own prebuilt_extension() verdict (None when its code cannot be imported here)."""
    try:
        from fastmace.kernels import _oeq_runtime as rt  # stdlib-only module; reads the manifest, imports nothing
        res = rt.prebuilt_extension(environ)
    except Exception:  # an older or broken FastMACE: the rule it documents stands in
        return None
    return res.usable, res.reason


def consumer_verdict(env: dict, environ=None, manifest_path: Path | None = None) -> ConsumerVerdict | None:
    """What the installed FastMACE will do with this prebuilt; None when FastMACE is not installed."""
    environ = os.environ if environ is None else environ
    version = _dist_version("fastmace")
    if version is None:
        return None
    name = f"FastMACE {version}"
    try:
        m = load_manifest(manifest_path or MANIFEST)
    except (OSError, ManifestError) as exc:
        return ConsumerVerdict(name, False, f"this prebuilt's manifest is unreadable ({exc})",
                               "pip install --force-reinstall fastmace-oeq-ext")
    own = _fastmace_own(environ)
    if own is not None:
        uses, reason = own
    else:
        reason = consumer_refusal(m, env)
        uses = reason is None
    if uses:
        return ConsumerVerdict(name, True, None, None)
    if reason and reason.startswith(f"{ENV_PREBUILT}="):
        return ConsumerVerdict(name, False, reason, f"unset {ENV_PREBUILT}")
    return ConsumerVerdict(name, False, reason, _consumer_fix(m, env))


def _consumer_fix(m: Manifest, env: dict) -> str:
    """The command after which FastMACE accepts this prebuilt (or the matching build of it)."""
    url = index_for_cuda(env.get("torch_cuda"))
    index = f" --extra-index-url {url}" if url else ""
    installed_torch, oeq = env.get("torch_distribution") or "", env.get("oeq_version") or ""
    if installed_torch != m.torch:
        # The same release without the local label is PyPI's copy of the same binary: only the label differs.
        no_deps = " --no-deps" if installed_torch.split("+")[0] == m.torch.split("+")[0] else ""
        return f"pip install --force-reinstall{no_deps} torch=={m.torch} --index-url {m.torch_index}"
    if oeq != m.openequivariance:
        if "+" in oeq:  # our binary OEq: the build of fastmace-oeq-ext that names it is on that line's index
            return f"pip install --upgrade {m.package}{index}"
        return f"pip install --force-reinstall --no-deps openequivariance=={m.openequivariance}{index}"
    return f"pip install --force-reinstall 'fastmace[oeq]'{index}"


# ---------------------------------------------------------------- the decision
def _oeq_precompiled(env: dict, mismatch: str | None) -> Candidate:
    """OEq 0.7.0 loads its stable extension (no JIT) under exactly these conditions; mismatch: _line_mismatch()."""
    name, extlib = "oeq-precompiled", env.get("oeq_extlib")
    if extlib is None:
        return Candidate(name, False, "openequivariance is not installed")
    marker = Path(extlib) / OEQ_STABLE_MARKER
    if not marker.exists():
        return Candidate(name, False, f"OpenEquivariance {env.get('oeq_version')} has no precompiled extension "
                                      f"({OEQ_STABLE_MARKER} not in {extlib})")
    if env.get("oeq_jit_forced"):
        return Candidate(name, False, "OEQ_JIT_EXTENSION=1 makes OpenEquivariance build its JIT extension")
    if env.get("torch_hip"):
        return Candidate(name, False, "OpenEquivariance's precompiled extension is CUDA-only (torch is a HIP build)")
    if mismatch:
        return Candidate(name, False, mismatch)
    release = (env.get("torch_version") or "0.0").split("+")[0].split(".")[:2]
    try:
        release_t = tuple(int(x) for x in release)
    except ValueError:
        release_t = (0, 0)
    if release_t < OEQ_STABLE_MIN_TORCH:
        return Candidate(name, False, f"torch {env.get('torch_version')} is older than 2.10 (OpenEquivariance's "
                                      "minimum for its precompiled extension)")
    module = sorted(Path(extlib).glob("oeq_stable_cuda*.so"))
    return Candidate(name, True, "OpenEquivariance loads its own precompiled stable extension",
                     str(module[0] if module else marker))


def _missing_message(site: str, manifest_path: Path) -> str:
    """Why the NVIDIA-wheel build cannot run, naming the wheels (pinned versions) to install."""
    missing = cudaflags.missing_cu13_parts(site)
    if not missing:
        return "libcuda.so.1 (the NVIDIA driver) was not found; set OEQ_CUDA_DRIVER_DIR"
    try:
        pins = load_manifest(manifest_path).requirement_pins()
    except (OSError, ManifestError):
        pins = {}
    dists = sorted({d for _, d in missing})
    reqs = " ".join(f"{d}=={pins[d]}" if d in pins else d for d in dists)
    return (f"the NVIDIA CUDA wheels lack {', '.join(f for f, _ in missing)}; "
            f"install them with: pip install {reqs}")


def resolve(env: dict | None = None, environ=None, manifest_path: Path | None = None) -> Resolution:
    """Consider every way to provide the host extension, in order; the first one taken wins."""
    environ = os.environ if environ is None else environ
    env = environment(environ) if env is None else env
    manifest_path = manifest_path or MANIFEST
    res = Resolution(prebuilt_mode(environ))
    mismatch = _line_mismatch(env)
    oeq = _oeq_precompiled(env, mismatch)
    res.candidates.append(oeq)
    if oeq.taken:
        return res
    if mismatch and oeq.reason == mismatch:
        # OEq will load that library anyway (its file is there) and fail: nothing else can be used.
        res.error = mismatch
        return res
    if res.mode == "never":
        res.candidates.append(Candidate("prebuilt", False, f"{ENV_PREBUILT}=0"))
    else:
        if env.get("torch_version") is None:
            d = Decision(False, "torch is not installed", None)
        else:
            d = check(manifest_path, {k: env.get(k) for k in ("torch_version", "torch_cuda", "cxx11_abi",
                                                               "oeq_version", "python_tag", "system", "machine")})
        res.candidates.append(Candidate("prebuilt", d.usable, d.reason, d.library))
        if d.usable:
            return res
        if res.mode == "require":
            res.error = f"{ENV_PREBUILT}=1 but the prebuilt library cannot be used: {d.reason}"
            return res
    res.candidates.append(_nvidia_wheels(env, res, manifest_path))
    if res.chosen:
        return res
    tools = env.get("tools", {})
    missing = [t for t, p in tools.items() if not p]
    if env.get("from_wheels") == "1":
        res.candidates.append(Candidate("host-toolchain", False, f"{ENV_FROM_WHEELS}=1 forbids torch's CUDA_HOME"))
    elif missing:
        res.candidates.append(Candidate("host-toolchain", False, f"{', '.join(missing)} not found"))
    elif not env.get("cuda_home_usable"):
        res.candidates.append(Candidate("host-toolchain", False, f"torch's CUDA_HOME ({env.get('cuda_home')}) "
                                                                  "has no CUDA headers"))
    else:
        found = ", ".join(f"{t} {p}" for t, p in tools.items())
        res.candidates.append(Candidate("host-toolchain", True, f"OpenEquivariance builds with {found} and "
                                                                 f"torch's CUDA_HOME ({env.get('cuda_home')})"))
    return res


def _nvidia_wheels(env: dict, res: Resolution, manifest_path: Path) -> Candidate:
    name, wheels = "nvidia-wheels", env.get("from_wheels", "auto")
    if wheels not in ("auto", "0", "1"):
        raise ValueError(f"{ENV_FROM_WHEELS}={wheels!r}: use auto, 1 or 0")
    if wheels == "0":
        return Candidate(name, False, f"{ENV_FROM_WHEELS}=0")
    if wheels == "auto" and env.get("cuda_home_usable"):
        return Candidate(name, False, f"torch's CUDA_HOME ({env.get('cuda_home')}) is usable; "
                                      f"{ENV_FROM_WHEELS}=1 prefers the wheels")
    site = env.get("torch_site")
    flags = cudaflags.wheel_build_flags(site) if site else None
    if flags is None:
        msg = _missing_message(site, manifest_path) if site else "torch is not installed"
        if wheels == "1":
            res.error = f"{ENV_FROM_WHEELS}=1 but {msg}"
        return Candidate(name, False, msg)
    missing = [t for t, p in env.get("tools", {}).items() if not p]
    if missing:
        return Candidate(name, False, f"building from the NVIDIA wheels needs {', '.join(missing)}, not found")
    res.flags = flags
    return Candidate(name, True, f"OpenEquivariance builds from the NVIDIA wheels ({flags.layout}) "
                                 "with the host compiler, no toolkit", site)
