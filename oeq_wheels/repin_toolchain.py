"""`oeq-wheels pins --toolchain`: re-pin [toolchain.HOSTARCH] from Debian's archive.

For each build host's Debian architecture, the packages are the closure of its `roots` (the compilers, and libc-bin,
which Debian installs with every libc6 of the same version) under Depends and Pre-Depends in the archive's Packages
index of pins.toml's Debian release: the first alternative of each dependency that the index has (or that a package
provides). The index is what apt reads; its sha256 is checked against
the suite's InRelease (whose signature apt would check: this does not, and says so in pins.toml). Hand-rolled because apt resolves only for the
host's own configured architectures and would need root to add another; the result is data anyone can check with
`apt-get download --print-uris` on a host of that architecture.
"""
from __future__ import annotations

import hashlib
import lzma
import re
import urllib.error
import urllib.parse
import urllib.request

import tomlkit

from .errors import UsageError


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            return r.read()
    except (urllib.error.URLError, OSError) as exc:
        raise UsageError(f"could not read {url}: {exc} -- check the network") from None


def packages_index(archive: str, suite: str, arch: str) -> bytes:
    """main/binary-ARCH/Packages of the suite, checked against the sha256 its InRelease lists."""
    release = _get(f"{archive}dists/{suite}/InRelease").decode()
    want = f"main/binary-{arch}/Packages.xz"
    sums = release.split("\nSHA256:\n", 1)[-1]
    digest = next((l.split()[0] for l in sums.splitlines() if l.startswith(" ") and l.split()[-1] == want), None)
    if digest is None:
        raise UsageError(f"{archive}dists/{suite}/InRelease lists no {want}; is {arch} an architecture of {suite}?")
    body = _get(f"{archive}dists/{suite}/{want}")
    if hashlib.sha256(body).hexdigest() != digest:
        raise UsageError(f"{want} does not have the sha256 InRelease lists; the mirror is mid-update: try again")
    return lzma.decompress(body)


def parse(index: bytes) -> tuple[dict[str, dict], dict[str, str]]:
    """Packages by name, and for each virtual package the first real package that provides it."""
    packages, provides = {}, {}
    for stanza in index.decode().split("\n\n"):
        fields, last = {}, None
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") and last:
                fields[last] += "\n" + line
                continue
            key, _, value = line.partition(":")
            fields[key], last = value.strip(), key
        if "Package" in fields:
            packages.setdefault(fields["Package"], fields)
            for p in fields.get("Provides", "").split(","):
                if p.split("(")[0].strip():
                    provides.setdefault(p.split("(")[0].strip(), fields["Package"])
    return packages, provides


def closure(packages: dict[str, dict], provides: dict[str, str], roots: list[str]) -> list[dict]:
    """The roots and everything they depend on, sorted by name."""
    chosen, todo = {}, list(roots)
    while todo:
        name = todo.pop()
        name = name if name in packages else provides.get(name, name)
        if name in chosen:
            continue
        if name not in packages:
            raise UsageError(f"the archive's index has no package {name!r}")
        chosen[name] = packages[name]
        for field in ("Pre-Depends", "Depends"):
            for dep in filter(None, (d.strip() for d in chosen[name].get(field, "").split(","))):
                alts = [re.sub(r"\s*\(.*?\)|:any|:native", "", a).strip() for a in dep.split("|")]
                todo.append(next((a for a in alts if a in chosen), None)
                            or next((a for a in alts if a in packages or a in provides), alts[0]))
    return [chosen[n] for n in sorted(chosen)]


def entries(debs: list[dict]) -> list[dict]:
    """pins.toml's form of each package: its name, version, pool path (as a URL path) and sha256."""
    return [{"name": d["Package"], "version": d["Version"], "file": _quote(d["Filename"]), "sha256": d["SHA256"]}
            for d in debs]


def _quote(path: str) -> str:
    """As apt prints a pool path in a URL (`apt-get download --print-uris`): '+' as %2b, '~' as %7e."""
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), urllib.parse.quote(path, safe="/").replace("~", "%7E"))


def repin(doc: tomlkit.TOMLDocument, log=lambda s: None) -> None:
    """Every [toolchain.ARCH] that names its roots, re-resolved in place."""
    tc = doc["toolchain"]
    for arch, table in tc.items():
        if not isinstance(table, dict) or "roots" not in table:
            continue
        packages, provides = parse(packages_index(str(tc["archive"]), str(tc["debian"]), arch))
        new = entries(closure(packages, provides, [str(r) for r in table["roots"]]))
        old = {(d["name"], d["version"]) for d in table.get("debs", [])}
        changed = [f"{d['name']} {d['version']}" for d in new if (d["name"], d["version"]) not in old]
        if [dict(d) for d in table.get("debs", [])] == new:
            log(f"[toolchain.{arch}]: {len(new)} packages, unchanged")
            continue
        arr = tomlkit.array()
        for d in new:
            t = tomlkit.inline_table()
            t.update(d)
            arr.append(t)
        arr.multiline(True)
        table["debs"] = arr
        log(f"[toolchain.{arch}]: {len(new)} packages; " + (f"new: {', '.join(changed)}" if changed else "unchanged"))
