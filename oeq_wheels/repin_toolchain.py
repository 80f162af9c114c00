"""`oeq-wheels pins --toolchain`: re-pin [toolchain.HOSTARCH] from Debian's archive.

For each build host's Debian architecture, the packages are the closure of its `roots` (the compilers, and libc-bin,
which Debian installs with every libc6 of the same version) under Depends and Pre-Depends in the archive's Packages
index of pins.toml's Debian release: the first alternative of each dependency that the index has (or that a package
provides). The index is what apt reads, and is trusted as apt trusts it: its sha256 is the one the suite's InRelease
lists, and InRelease is signed by Debian's archive key (gpgv against debian-archive-keyring; only the text gpgv
verified is read). Hand-rolled because apt resolves only for the host's own configured architectures and would need
root to add another; the result is data anyone can check with `apt-get download --print-uris` on a host of that
architecture.
"""
from __future__ import annotations

import hashlib
import lzma
import re
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import tomlkit

from . import proc
from . import debian
from .errors import Refused, RegistryError, UsageError


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            return r.read()
    except (urllib.error.URLError, OSError) as exc:
        raise RegistryError(f"could not read {url}: {exc} -- check the network") from None


def verified_release(data: bytes, url: str, suite: str, keyring: Path | None = None,
                     not_before: str | None = None) -> str:
    """The text of an InRelease that Debian's archive keys signed, as gpgv writes out what it verified: text outside
    the signed message (appended to the file, say) is never read. Any signature gpgv cannot check stops re-pinning
    (a second message signed by another key beside Debian's would otherwise be read with it)."""
    if keyring is None:  # Debian's own: installed where it is missing and this runs as root, as debootstrap is
        keyring = debian.ARCHIVE_KEYRING
        for package, program in (("gpgv", "gpgv"), ("debian-archive-keyring", str(keyring))):
            why = debian.ensure(package, program)
            if why:
                raise UsageError(f"cannot check the signature of {url}: {why}; install {package} "
                                 f"(`apt-get install {package}`) and re-pin again")
    with tempfile.TemporaryDirectory(prefix="oeq-wheels-gpgv-") as tmp:
        signed = Path(tmp) / "InRelease"
        signed.write_bytes(data)
        # A home of its own: gpgv trusts the named keyring alone, never one of this user's.
        res = proc.run(["gpgv", "--homedir", tmp, "--keyring", str(keyring), "--output", "-", str(signed)],
                       capture_output=True)
    if res.returncode != 0:
        said = [l for l in res.stderr.decode(errors="replace").splitlines() if l.strip()]
        why = said[-1] if said else f"gpgv exit {res.returncode}"
        raise Refused(f"{url} is not signed by Debian's archive keys ({why}; keyring {keyring}): nothing "
                      "re-pinned; use a mirror that serves Debian's own files (pins.toml [toolchain] archive), or "
                      "update debian-archive-keyring if Debian has new keys")
    text = res.stdout.decode(errors="replace")
    fields = release_fields(text)
    names = [fields.get(k, "").strip() for k in ("Codename", "Suite")]
    if suite not in names:  # a release of another suite, signed as well, served in this one's place
        raise Refused(f"{url} is signed but is Debian {' / '.join(n for n in names if n) or 'no named suite'}, "
                      f"not {suite}: nothing re-pinned; use a mirror that serves {suite} (pins.toml [toolchain] "
                      "archive)")
    if not_before is not None:  # an older release, validly signed, replayed by a mirror: its index may be one
        # whose packages Debian has since replaced (a security fix)
        date, floor = release_date(fields.get("Date", "")), release_date(not_before)
        if date is None or floor is None or date < floor:
            raise Refused(f"{url} is dated {fields.get('Date', '(no Date)').strip()!r}, older than the last one "
                          f"re-pinning accepted ({not_before!r}, pins.toml [toolchain] release_date): a replayed "
                          "release; nothing re-pinned; use a mirror that serves Debian's current files")
    return text


def accepted_date(archive: str, suite: str, not_before: str | None = None, keyring: Path | None = None) -> str:
    """The Date of the suite's InRelease, verified as packages_index verifies it: what pins.toml [toolchain]
    release_date records after a re-pin, the floor for the next one."""
    url = f"{archive}dists/{suite}/InRelease"
    return release_fields(verified_release(_get(url), url, suite, keyring, not_before)).get("Date", "").strip()


def release_fields(text: str) -> dict[str, str]:
    """An InRelease's header fields (Codename, Suite, Date ...), as verified text gives them."""
    return dict(l.split(":", 1) for l in text.split("\n\n", 1)[0].splitlines() if ":" in l and l[:1] != " ")


def release_date(text: str):
    """An InRelease's Date (RFC 2822, UTC) as a datetime, or None where it is none."""
    import email.utils
    try:
        return email.utils.parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError):
        return None


def packages_index(archive: str, suite: str, arch: str, keyring: Path | None = None,
                   not_before: str | None = None) -> bytes:
    """main/binary-ARCH/Packages of the suite, checked against the sha256 its signed InRelease lists (an InRelease
    dated before not_before refused)."""
    url = f"{archive}dists/{suite}/InRelease"
    release = verified_release(_get(url), url, suite, keyring, not_before)
    want = f"main/binary-{arch}/Packages.xz"
    sums = release.partition("\nSHA256:\n")[2]
    digest = next((l.split()[0] for l in sums.splitlines() if l.startswith(" ") and l.split()[-1] == want), None)
    if digest is None:
        raise UsageError(f"{archive}dists/{suite}/InRelease lists no {want}; is {arch} an architecture of {suite}?")
    body = _get(f"{archive}dists/{suite}/{want}")
    if hashlib.sha256(body).hexdigest() != digest:
        raise Refused(f"{want} does not have the sha256 InRelease lists; the mirror is mid-update: try again")
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
    floor = str(tc["release_date"]) if "release_date" in tc else None
    for arch, table in tc.items():
        if not isinstance(table, dict) or "roots" not in table:
            continue
        packages, provides = parse(packages_index(str(tc["archive"]), str(tc["debian"]), arch, not_before=floor))
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
        table["root"] = root_digest(str(tc["archive"]), new, log)
        log(f"[toolchain.{arch}]: {len(new)} packages; " + (f"new: {', '.join(changed)}" if changed else "unchanged"))
    tc["release_date"] = accepted_date(str(tc["archive"]), str(tc["debian"]), floor)


def root_digest(archive: str, debs: list[dict], log=lambda s: None) -> str:
    """The content digest of the root these packages make (buildroot.content_digest), made from them once in a
    temporary folder: what each build then checks its cached root against."""
    import shutil
    from . import buildroot
    from .files import default_cache
    from .inputs import fetch
    from .pins import Deb, Pinned
    pinned = tuple(Deb(d["name"], d["version"], d["file"], d["sha256"]) for d in debs)
    files = fetch.ensure([Pinned(d.name, d.version, Path(d.file).name, d.sha256, url=archive + d.file) for d in pinned],
                         default_cache(), log)
    tmp = Path(tempfile.mkdtemp(prefix="oeq-wheels-root-digest-"))
    try:
        return buildroot.content_digest(buildroot.unpack_root(pinned, files, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
