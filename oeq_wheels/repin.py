"""`oeq-wheels pins`: re-pin pins.toml from the registry, keeping its comments and layout (tomlkit), or check
that every pin is still there with the same sha256.

--torch X.Y.Z re-pins one matrix (the release matrix unless --matrix): torch's wheel for each CPython and
architecture it needs, the NVIDIA wheels at the versions torch's own metadata requires (its `nvidia-*==` or
`cuda-toolkit[...]==` requirement), and torch_local/cuda from the wheel's torch/version.py. Both are read
from the remote wheel by range requests (registry.read_members): no torch wheel is downloaded. Hashes come
from the registry's JSON API. Nothing is written unless the whole re-pinned file loads (pins.load)."""
from __future__ import annotations

import difflib
import hashlib
import os
import re
import tempfile
import tomllib
import zipfile
from pathlib import Path

import tomlkit
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from . import install_lines, pins as pins_mod, registry
from .inputs import link_stubs, fetch, members
from .errors import PinsError, RepinError
from .files import write_atomic


def _version(text: str, what: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise RepinError(f"{what} {text!r} is not a version (X.Y.Z)") from None


def _wheels(files: list[registry.File]):
    for f in files:
        if f.yanked or not f.filename.endswith(".whl"):
            continue
        try:
            name, version, build, tags = parse_wheel_filename(f.filename)
        except Exception:  # noqa: BLE001 - a file name no tool could install is no candidate
            continue
        yield f, version, build, tags


def _platform_arch(tags, arch: str) -> bool:
    return any(t.platform.startswith(("manylinux", "linux")) and t.platform.endswith("_" + arch) for t in tags)


def torch_wheel(files: list[registry.File], version: Version, cp: str, arch: str) -> registry.File | None:
    """torch's wheel of one CPython and architecture (the highest build tag, as pip and uv take it)."""
    hits = [(build, f) for f, v, build, tags in _wheels(files)
            if v == version and _platform_arch(tags, arch) and any(t.interpreter == cp and t.abi == cp for t in tags)]
    return max(hits, key=lambda h: h[0])[1] if hits else None


def _marker_env(arch: str, extras: set[str]) -> list[dict]:
    base = {"platform_system": "Linux", "sys_platform": "linux", "platform_machine": arch, "os_name": "posix",
            "python_version": "3.12", "python_full_version": "3.12.0", "implementation_name": "cpython"}
    return [dict(base, extra=e) for e in sorted(extras or {""})]


def requirements(metadata: bytes, arch: str, extras: set[str] = frozenset()) -> dict[str, Requirement]:
    """Requires-Dist that apply on Linux `arch` (with any of `extras` asked for), by canonical name."""
    out = {}
    for line in metadata.decode(errors="replace").splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is None or any(req.marker.evaluate(env) for env in _marker_env(arch, set(extras))):
            out.setdefault(req.name.lower().replace("_", "-"), req)
    return out


def _version_py(text: str, name: str) -> str | None:
    m = re.search(rf"^{name}(?::[^=]*)?\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return m.group(1) if m else None


def _newest(files: list[registry.File], spec: SpecifierSet) -> Version | None:
    found = {v for f, v, _b, _t in _wheels(files) if spec.contains(v, prereleases=True)}
    return max(found) if found else None


def _nvidia_file(files: list[registry.File], project: str, version: Version, arch: str) -> registry.File:
    hits = [f for f, v, _b, tags in _wheels(files) if v == version and _platform_arch(tags, arch)]
    if not hits:
        raise RepinError(f"{project} {version} has no Linux {arch} wheel on the registry")
    return hits[0]


class Repinner:
    """One pins.toml being re-pinned: the plain data to read, the tomlkit document to write, text renames."""

    def __init__(self, path: Path, index: str, readme: Path | None = None):
        self.path, self.index, self.readme = path, index, readme
        self.text = path.read_text()
        self.data = tomllib.loads(self.text)
        self.doc = tomlkit.parse(self.text)
        self.renames: list[tuple[str, str]] = []   # quoted strings renamed in the written text
        self.notes: list[str] = []
        self._files: dict[str, list[registry.File]] = {}

    def files(self, project: str) -> list[registry.File]:
        if project not in self._files:
            self._files[project] = registry.project_files(self.index, project)
        return self._files[project]

    # ------------------------------------------------------------------ torch
    def torch(self, version_text: str, matrix: str | None, pythons: list[str] | None) -> None:
        version = _version(version_text, "--torch")
        name = matrix or self.data["build"]["default_matrix"]
        if name not in self.data.get("matrix", {}):
            raise RepinError(f"no [matrix.{name!r}] in {self.path}; it defines: {', '.join(self.data['matrix'])}")
        m = self.data["matrix"][name]
        old = m["torch_version"]
        pythons = list(m["pythons"]) if pythons is None else pythons
        need = {pins_mod.TOP_ARCH: {pins_mod.cp_tag(p) for p in pythons}}
        for ln in self.data["oeq_binary"]["lines"].values():
            for arch in ln.get("arches", [pins_mod.TOP_ARCH]):
                build = {**ln, **ln.get("arch", {}).get(arch, {})}  # an [.arch.NAME] table reads its own matrix
                if build["torch_matrix"] == name:
                    need.setdefault(arch, set()).add(build["torch_wheel"])
        files = self.files("torch")
        if not any(v == version for _f, v, _b, _t in _wheels(files)):
            raise RepinError(f"torch {version} is not on the registry ({self.index})")
        chosen: dict[str, dict[str, registry.File]] = {}
        for arch, tags in need.items():
            for cp in sorted(tags):
                f = torch_wheel(files, version, cp, arch)
                if f is None:
                    have = sorted({t.interpreter for f2, v, _b, ts in _wheels(files) if v == version
                                   and _platform_arch(ts, arch) for t in ts if re.fullmatch(r"cp3\d+", t.abi)})
                    raise RepinError(f"torch {version} has no {cp} wheel for Linux {arch} on the registry (it has: "
                                     f"{', '.join(have) or 'none'}); re-pin with --python naming CPythons it has")
                chosen.setdefault(arch, {})[cp] = f
        top = chosen[pins_mod.TOP_ARCH]
        first = top[min(top)] if top else \
            next(iter(next(iter(chosen.values())).values()))
        got = registry.read_members(first, [r"torch-[^/]+\.dist-info/METADATA", "torch/version.py"])
        version_py = got["torch/version.py"].decode(errors="replace")
        full, cuda = _version_py(version_py, "__version__"), _version_py(version_py, "cuda")
        if not cuda or not full or "+" not in full:
            raise RepinError(f"torch {version}'s wheel {first.filename} is not a CUDA build (torch/version.py: "
                             f"__version__ {full!r}, cuda {cuda!r})")
        local = full.split("+", 1)[1]
        nvidia, toolkit = self._nvidia_versions(got[r"torch-[^/]+\.dist-info/METADATA"], m["nvidia"], version)
        # The matrix table: values replaced in place, so their comments stay.
        mt = self.doc["matrix"][name]
        mt["torch_version"] = str(version)
        mt["torch_local"] = local
        mt["cuda"] = cuda
        if toolkit and "cuda_toolkit" in mt:
            mt["cuda_toolkit"] = toolkit
        if "consumer_torch" in mt:
            mt["consumer_torch"] = f"{version}+{local}" if "+" in m["consumer_torch"] else str(version)
        if "local_version" in mt and old in m["local_version"]:
            mt["local_version"] = m["local_version"].replace(old, str(version))
        if pythons != list(m["pythons"]):
            mt["pythons"] = pythons
        if nvidia != list(m["nvidia"]):
            arr = tomlkit.array()
            arr.extend(nvidia)
            mt["nvidia"] = arr.multiline(True)
        for arch, wheels in chosen.items():
            table = pins_mod.arch_table(mt, arch, "torch_wheels")
            for cp in [k for k in table if k not in wheels]:
                del table[cp]
            for cp, f in sorted(wheels.items()):
                entry = tomlkit.inline_table()
                entry.update({"file": f.filename, "sha256": f.sha256})
                table[cp] = entry
        self._nvidia_entries(name, list(m["nvidia"]), nvidia)
        self.notes.append("the new torch and NVIDIA wheels have no RECORD pin yet: builds download them whole until "
                          "`oeq-wheels pins --records` (one full download each) pins them")
        new_name = f"torch-{version}"
        if name == f"torch-{old}" and new_name != name:
            if new_name in self.data["matrix"]:
                raise RepinError(f"[matrix.{new_name!r}] exists already; re-pin that one (--matrix {new_name})")
            self.renames.append((f'"{name}"', f'"{new_name}"'))
            self.notes.append(f"matrix {name} is now {new_name} (build --matrix {new_name})")
        if name == self.data["build"]["default_matrix"] and str(version) != old:
            self.notes.append(f"the fastmace-oeq-ext wheels change: give --next-post before releasing them "
                              f"({self.data['package']['version']} is a released name)")

    def _nvidia_versions(self, metadata: bytes, refs: list[str], version: Version) -> tuple[list[str], str | None]:
        """Each NVIDIA wheel of the matrix at the version torch requires: directly, or through cuda-toolkit."""
        reqs = requirements(metadata, pins_mod.TOP_ARCH)  # the top-level NVIDIA pins'
        toolkit_req = reqs.get("cuda-toolkit")
        toolkit_version, via_toolkit = None, {}
        if toolkit_req is not None:
            files = self.files("cuda-toolkit")
            tv = _newest(files, toolkit_req.specifier)
            if tv is None:
                raise RepinError(f"torch {version} requires {toolkit_req}, which the registry does not have")
            toolkit_version = str(tv)
            tk = next(f for f, v, _b, _t in _wheels(files) if v == tv)
            meta = _small_metadata(registry.download(tk))  # a metapackage: a few KB, read whole
            # "all": every component at the toolkit's release, the header-only ones (crt, cccl) too.
            via_toolkit = requirements(meta, pins_mod.TOP_ARCH, set(toolkit_req.extras) | {"all"})
        out = []
        for ref in refs:
            project, _, pinned = ref.partition("==")
            req = reqs.get(project) or via_toolkit.get(project)
            if req is None:
                out.append(ref)
                self.notes.append(f"kept {ref}: torch {version} does not require {project}")
                continue
            v = _newest(self.files(project), req.specifier)
            if v is None:
                raise RepinError(f"torch {version} requires {req}, which the registry does not have")
            out.append(f"{project}=={v}")
        return out, toolkit_version

    def _nvidia_entries(self, matrix: str, old: list[str], new: list[str]) -> None:
        """An [nvidia."name==version"] entry for each new pin: the old entry re-pinned in place where nothing
        else names it (its comments and position stay), else a new one."""
        table = self.doc["nvidia"]
        users = [r for n, mm in self.data["matrix"].items() if n != matrix for r in mm["nvidia"]]
        users += [r for ln in self.data["oeq_binary"]["lines"].values()
                  for t in (ln, *ln.get("arch", {}).values()) for r in t.get("nvidia", ())]
        for before, after in zip(old, new):
            if before == after or after in self.data.get("nvidia", {}):
                continue
            project, _, v = after.partition("==")
            entry = self.data["nvidia"][before]
            arches = [pins_mod.TOP_ARCH, *entry.get("arch", {})]
            picked = {a: _nvidia_file(self.files(project), project, Version(v), a) for a in arches}
            if before not in users:
                t = table[before]
                for a in arches:
                    own = pins_mod.arch_table(t, a)
                    own["file"], own["sha256"] = picked[a].filename, picked[a].sha256
                    own.pop("record", None)  # the old file's; `--records` takes the new one's
                self.renames.append((f'"{before}"', f'"{after}"'))
            else:
                t = tomlkit.table()
                top = picked[pins_mod.TOP_ARCH]
                t["file"], t["sha256"] = top.filename, top.sha256
                if entry.get("libs"):
                    t["libs"] = list(entry["libs"])
                table[after] = t

    # ------------------------------------------------------------------ RECORD pins
    def records(self, cache: Path, log=lambda s: None) -> int:
        """The sha256 of RECORD for every pinned torch and NVIDIA wheel that has none (new pins), and the view digest
        of each library the build links ([stubs."FILE"], oeq_wheels/inputs/link_stubs.py), each from one full download checked
        against its pinned sha256 (kept in the cache: the next build reads it). With them, builds fetch only the
        members they read and link against stubs (oeq_wheels.inputs.members, oeq_wheels.inputs.link_stub_store). Returns how many
        wheels gained a pin."""
        torch_libs = [f"lib{l}.so" for l in self.doc["openequivariance"]["torch_libs"]]
        wanted = []  # (the tomlkit entry to write, what to download, the libraries it is linked by)
        for m in self.doc["matrix"].values():
            tables = [m["torch_wheels"], *(a["torch_wheels"] for a in m.get("arch", {}).values())]
            wanted += [(w, pins_mod.Pinned("torch", str(m["torch_version"]), str(w["file"]), str(w["sha256"])),
                        torch_libs) for t in tables for w in t.values()]
        for ref, e in self.doc["nvidia"].items():
            project, _, version = ref.partition("==")
            wanted += [(x, pins_mod.Pinned(project, version, str(x["file"]), str(x["sha256"])), list(e.get("libs", [])))
                       for x in (e, *e.get("arch", {}).values())]
        stubs = self.doc.setdefault("stubs", tomlkit.table(is_super_table=True))
        todo = [(entry, pin, libs) for entry, pin, libs in wanted
                if "record" not in entry or (libs and pin.file not in stubs)]
        if todo:
            files = fetch.ensure([pin for _, pin, _ in todo], cache, log, whole=True)
            for entry, pin, libs in todo:
                entry["record"] = record_sha256(files[pin.file])
                if libs and pin.file not in stubs:
                    stubs[pin.file] = stub_pins(files[pin.file], libs)
        return len(todo)

    # ------------------------------------------------------------------ OEq and the rebuild number
    def oeq(self, version_text: str) -> None:
        version = _version(version_text, "--oeq")
        for f in self.files("openequivariance"):
            if f.yanked or not f.filename.endswith(".tar.gz"):
                continue
            if parse_sdist_filename(f.filename)[1] == version:
                o = self.doc["openequivariance"]
                o["version"], o["file"], o["sha256"] = str(version), f.filename, f.sha256
                self.doc["package"]["version"] = str(version)
                self.notes.append(f"fastmace-oeq-ext is now {version} (a new OEq release starts without .postN)")
                return
        raise RepinError(f"openequivariance {version} has no sdist on the registry ({self.index})")

    def post(self, number: int | None, next_post: bool) -> None:
        current = Version(str(self.doc["package"]["version"]))
        n = (current.post or 0) + 1 if next_post else number
        if n is None or n < 1:
            raise RepinError("--post takes a rebuild number of 1 or more")
        self.doc["package"]["version"] = f"{current.base_version}.post{n}"

    # ------------------------------------------------------------------ writing
    def result(self) -> str:
        stubs = self.doc.get("stubs", {})
        for file in [f for f in stubs if f not in _pinned_files(self.doc)]:
            del stubs[file]  # the stubs of a file no longer pinned (a re-pinned torch or NVIDIA wheel)
        text = tomlkit.dumps(self.doc)
        for a, b in self.renames:
            text = text.replace(a, b)
        return text

    def write(self) -> str:
        """Check that the re-pinned file loads for every matrix, then put it in place, and README's lines derived
        from pins (derived_lines) rewritten to match; return the diff of both."""
        text = self.result()
        fd, tmp = tempfile.mkstemp(prefix=".pins.", suffix=".toml", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            data = tomllib.loads(text)
            for name, m in data["matrix"].items():
                if m["pythons"]:
                    pins_mod.load(name, path=Path(tmp))
            after = pins_mod.load(path=Path(tmp))
            readme = None
            if self.readme is not None:
                old = self.readme.read_text()
                readme = rewrite_derived(old, derived_lines(pins_mod.load(path=self.path)), derived_lines(after))
        except PinsError as exc:
            os.unlink(tmp)
            raise RepinError(f"the re-pinned file would not load ({exc}); {self.path.name} untouched") from None
        except BaseException:
            os.unlink(tmp)
            raise
        os.replace(tmp, self.path)
        diff = "".join(difflib.unified_diff(self.text.splitlines(True), text.splitlines(True),
                                            str(self.path.name), str(self.path.name), n=0))
        if readme is not None and readme != old:
            write_atomic(self.readme, readme)
            diff += "".join(difflib.unified_diff(old.splitlines(True), readme.splitlines(True),
                                                 self.readme.name, self.readme.name, n=0))
        return diff


def _pinned_files(node) -> set[str]:
    """Every `file = ...` of the pins document but [stubs] (which is keyed by them)."""
    out = set()
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "file" and isinstance(v, str):
                out.add(str(v))
            elif k != "stubs":
                out |= _pinned_files(v)
    elif isinstance(node, list):
        for v in node:
            out |= _pinned_files(v)
    return out


def stub_pins(wheel: Path, libs: list[str]):
    """[stubs."FILE"] of one wheel: for each of its libraries named in libs, the digest of its dynamic-symbol view
    and, where the tables lie in the first quarter of the file (NVIDIA's; torch's were moved to the end by
    patchelf), their places, so that builds fetch only the first bytes of the member."""
    out = tomlkit.table()
    with zipfile.ZipFile(wheel) as zf, tempfile.TemporaryDirectory() as tmp:
        for info in zf.infolist():
            lib = info.filename.rsplit("/", 1)[-1]
            if lib not in libs or "/lib/" not in f"/{info.filename}":
                continue
            path = Path(zf.extract(info, tmp))
            view, tables = link_stubs.view_of_file(path)
            entry = tomlkit.inline_table()
            entry["digest"] = view.digest()
            if tables.end <= path.stat().st_size // 4:
                entry["tables"] = tables.to_list()
            out[lib] = entry
            path.unlink()
    missing = sorted(set(libs) - set(out))
    if missing:
        raise RepinError(f"{wheel.name} has no {', '.join(missing)} to stub; check the libs pinned for it")
    return out


def record_sha256(wheel: Path) -> str:
    """The sha256 of a wheel's .dist-info/RECORD."""
    with zipfile.ZipFile(wheel) as zf:
        return hashlib.sha256(zf.read(members.record_name(zf.namelist(), wheel.name))).hexdigest()


def derived_lines(pins: pins_mod.Pins) -> list[str]:
    """README's lines made from pins: the users' install commands and FastMACE's (tests/unit/test_install_lines.py holds
    README to them)."""
    return [*install_lines.ours(pins), *install_lines.fastmace(pins)]


def rewrite_derived(text: str, before: list[str], after: list[str]) -> str:
    """`text` with each whole line of `before` replaced by its counterpart in `after` (prose is left alone)."""
    swap = {b: a for b, a in zip(before, after) if b != a}
    out = []
    for line in text.splitlines(True):
        body = line.rstrip("\n")
        out.append(swap.get(body, body) + line[len(body):])
    return "".join(out)


def _small_metadata(wheel: bytes) -> bytes:
    import io
    import zipfile
    with zipfile.ZipFile(io.BytesIO(wheel)) as zf:
        return zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA")))


def pinned_files(data: dict) -> list[tuple[str, str, str]]:
    """(project, file, sha256) of every file pins.toml pins, each once."""
    out = [("openequivariance", data["openequivariance"]["file"], data["openequivariance"]["sha256"])]
    for key in ("pybind11", "nanobind"):
        out.append((key, data[key]["file"], data[key]["sha256"]))
    out += [(w["name"], w["file"], w["sha256"]) for w in data["consumer"]["wheels"]]
    for ref, e in data.get("nvidia", {}).items():
        project = ref.partition("==")[0]
        out += [(project, x["file"], x["sha256"]) for x in (e, *e.get("arch", {}).values())]
    for m in data["matrix"].values():
        tables = [m["torch_wheels"], *(a["torch_wheels"] for a in m.get("arch", {}).values())]
        out += [("torch", w["file"], w["sha256"]) for t in tables for w in t.values()]
    return list(dict.fromkeys(out))


def check(path: Path, index: str) -> tuple[int, list[str]]:
    """Every pin against the registry: (how many were checked, one line per problem)."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise PinsError(f"cannot read pins file {path}: {getattr(exc, 'strerror', None) or exc}; name an existing "
                        "pins.toml with --pins") from None
    files = pinned_files(data)
    problems, listed = [], {}
    for project, name, sha in files:
        if project not in listed:
            listed[project] = {f.filename: f for f in registry.project_files(index, project)}
        f = listed[project].get(name)
        if f is None:
            problems.append(f"{name}: not on the registry any more (removed); re-pin {project}")
        elif f.sha256 != sha:
            problems.append(f"{name}: the registry's sha256 is {f.sha256}, pinned {sha} (the file was replaced)")
        elif f.yanked:
            problems.append(f"{name}: yanked on the registry; re-pin {project}")
    return len(files), problems
