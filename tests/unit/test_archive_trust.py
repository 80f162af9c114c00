"""The toolchain's trust root is Debian's archive key: re-pinning reads only the part of InRelease that gpgv verified
against debian-archive-keyring, and the build image's debootstrap checks the archive with the same keyring. A fake
InRelease is signed with a throwaway key made here (gpg, in a home of its own); a real one, where apt left one in its
lists, verifies against Debian's keyring."""
import hashlib
import lzma
import tomllib
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from oeq_wheels import buildimage, debian, pins as P, repin_toolchain as R
from oeq_wheels.errors import Refused, UsageError

ARCHIVE = "http://archive.invalid/debian/"
URL = f"{ARCHIVE}dists/bookworm/InRelease"


class Signer:
    """A throwaway OpenPGP key in a GNUPGHOME of its own (short path: gpg-agent's socket lives there)."""

    def __init__(self, name: str):
        self.home = Path(tempfile.mkdtemp(prefix="oeq-gpg-"))
        self.gpg = ["gpg", "--homedir", str(self.home), "--batch", "--quiet", "--pinentry-mode", "loopback",
                    "--passphrase", ""]
        subprocess.run([*self.gpg, "--quick-gen-key", f"{name} <{name}@example.invalid>", "ed25519", "sign",
                        "never"], check=True, capture_output=True)
        self.keyring = self.home / "pub.gpg"
        self.keyring.write_bytes(subprocess.run([*self.gpg, "--export"], check=True, capture_output=True).stdout)

    def sign(self, text: str) -> bytes:
        return subprocess.run([*self.gpg, "--clearsign"], input=text.encode(), check=True, capture_output=True).stdout

    def close(self):
        subprocess.run(["gpgconf", "--homedir", str(self.home), "--kill", "gpg-agent"], capture_output=True)
        shutil.rmtree(self.home, ignore_errors=True)


@pytest.fixture
def signers():
    if not (shutil.which("gpg") and shutil.which("gpgv")):
        pytest.skip("gpg and gpgv are needed to make and check a throwaway signature (apt-get install gnupg gpgv)")
    made = []

    def make(name):
        made.append(Signer(name))
        return made[-1]
    yield make
    for s in made:
        s.close()


def release(codename: str = "bookworm", date: str = "Sat, 11 Jul 2026 10:16:37 UTC", **sums: bytes) -> str:
    """An InRelease's text listing each index (main/binary-ARCH/Packages.xz) by its sha256."""
    lines = [f" {hashlib.sha256(body).hexdigest()} {len(body)} main/binary-{arch}/Packages.xz"
             for arch, body in sums.items()]
    return (f"Origin: Debian\nSuite: oldstable\nCodename: {codename}\nDate: {date}\nSHA256:\n" + "\n".join(lines)
            + "\n")


def serve(monkeypatch, files: dict[str, bytes]):
    monkeypatch.setattr(R, "_get", lambda url: files[url])


INDEX = b"Package: g++\nVersion: 1\nFilename: pool/main/g/g++_1_amd64.deb\nSHA256: aa\n"


def test_the_index_is_read_through_a_signed_inrelease(signers, monkeypatch):
    archive = signers("archive")
    body = lzma.compress(INDEX)
    serve(monkeypatch, {URL: archive.sign(release(amd64=body)),
                        f"{ARCHIVE}dists/bookworm/main/binary-amd64/Packages.xz": body})
    assert R.packages_index(ARCHIVE, "bookworm", "amd64", keyring=archive.keyring) == INDEX


def test_text_outside_the_signed_message_is_never_read(signers, monkeypatch):
    """Sums appended (or put before) the signed message are not the archive's: an index they name is not found."""
    archive = signers("archive")
    forged = lzma.compress(INDEX)
    extra = f"SHA256:\n {hashlib.sha256(forged).hexdigest()} {len(forged)} main/binary-arm64/Packages.xz\n".encode()
    signed = archive.sign(release(amd64=b"x"))
    for data in (signed + extra, extra + b"\n" + signed):
        serve(monkeypatch, {URL: data, f"{ARCHIVE}dists/bookworm/main/binary-arm64/Packages.xz": forged})
        with pytest.raises(UsageError, match=r"InRelease lists no main/binary-arm64/Packages.xz"):
            R.packages_index(ARCHIVE, "bookworm", "arm64", keyring=archive.keyring)


def test_an_inrelease_debians_keys_did_not_sign_stops_repinning_in_one_line(signers, monkeypatch):
    """Unsigned, signed by another key, changed after signing, or a second message by another key after Debian's:
    one line naming the file and the fix, and nothing read from it."""
    archive, other = signers("archive"), signers("other")
    good = archive.sign(release(amd64=b"x"))
    cases = {"unsigned": release(amd64=b"x").encode(), "another key": other.sign(release(amd64=b"x")),
             "changed": good.replace(b"Codename: bookworm", b"Codename: bookwurm"),
             "second message": good + other.sign(release(arm64=b"y"))}
    # Debian's own keyring where this host has it: a throwaway signature is not Debian's.
    rings = [archive.keyring] + ([debian.ARCHIVE_KEYRING] if debian.ARCHIVE_KEYRING.is_file() else [])
    for ring in rings:
        for case, data in cases.items():
            if ring != archive.keyring and case != "another key":
                continue
            serve(monkeypatch, {URL: data})
            with pytest.raises(Refused) as exc:  # a refused input (exit 1), not a usage error
                R.packages_index(ARCHIVE, "bookworm", "amd64", keyring=ring)
            line = str(exc.value)
            assert "\n" not in line and line.startswith(f"{URL} is not signed by Debian's archive keys ("), (case, line)
            assert "nothing re-pinned" in line and "debian-archive-keyring" in line, (case, line)


def test_a_signed_inrelease_of_another_suite_is_refused(signers, monkeypatch):
    archive = signers("archive")
    serve(monkeypatch, {URL: archive.sign(release("trixie", amd64=b"x"))})
    with pytest.raises(Refused, match=r"is signed but is Debian trixie / oldstable, not bookworm: nothing re-pinned"):
        R.packages_index(ARCHIVE, "bookworm", "amd64", keyring=archive.keyring)


def debian_inreleases() -> list[Path]:
    """Debian's InRelease files as apt keeps them (verbatim) in its lists, on a Debian host."""
    return [p for p in sorted(Path("/var/lib/apt/lists").glob("*_dists_*_InRelease"))
            if p.read_bytes().count(b"\nOrigin: Debian\n") == 1]


def test_a_real_debian_inrelease_verifies_against_debians_keyring():
    found = debian_inreleases()
    if not (found and debian.ARCHIVE_KEYRING.is_file() and shutil.which("gpgv")):
        pytest.skip("no Debian InRelease in apt's lists, or no debian-archive-keyring or gpgv here")
    data = found[0].read_bytes()
    codename = next(l.split(":", 1)[1].strip() for l in data.decode().splitlines() if l.startswith("Codename:"))
    text = R.verified_release(data + b"SHA256:\n " + b"0" * 64 + b" 1 main/binary-forged/Packages.xz\n",
                              str(found[0]), codename)
    assert f"Codename: {codename}" in text and "\nSHA256:\n" in text and "binary-forged" not in text


def test_the_build_images_debootstrap_checks_the_archive_with_debians_keyring(tmp_path, monkeypatch):
    """debootstrap of pins.toml's release from its archive, with --keyring: the signature of what it fetches is
    checked against Debian's keys, not trusted on first use; a host without the keyring stops before it runs."""
    ran = []
    monkeypatch.setattr(buildimage.debian, "as_root", lambda: [])
    monkeypatch.setattr(buildimage.debian, "ensure", lambda package, program: None)
    monkeypatch.setattr(buildimage.fetch, "ensure", lambda items, cache, log: {})
    monkeypatch.setattr(buildimage, "_machine", lambda: "x86_64")

    def run(cmd, **kw):
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "E: stopped here by the test\n")
    monkeypatch.setattr(buildimage.proc, "run", run)
    pins = P.load()
    with pytest.raises(buildimage.BuildImageError, match="debootstrap bookworm from .* failed"):
        buildimage.rootfs(pins, tmp_path, [])
    (debootstrap,) = [c for c in ran if "debootstrap" in c]
    assert f"--keyring={debian.ARCHIVE_KEYRING}" in debootstrap
    assert debootstrap[-3] == pins.toolchain.debian and debootstrap[-1] == pins.toolchain.archive

    def no_keyring(package, program):
        return "debian-archive-keyring is not installed and installing it needs root" \
            if package == "debian-archive-keyring" else None
    monkeypatch.setattr(buildimage.debian, "ensure", no_keyring)
    ran.clear()
    with pytest.raises(buildimage.BuildImageError) as exc:
        buildimage.rootfs(pins, tmp_path, [])
    assert str(exc.value) == ("making the build image needs debian-archive-keyring (Debian's archive keys: "
                              "debootstrap checks the archive's signature with them): debian-archive-keyring is not "
                              "installed and installing it needs root; install debian-archive-keyring (`apt-get "
                              "install debian-archive-keyring`)")
    assert not [c for c in ran if "debootstrap" in c]


def test_a_signed_inrelease_older_than_the_last_accepted_one_is_refused(signers, monkeypatch):
    """A mirror replaying an earlier, validly signed release (whose index may name packages Debian has since
    replaced) is refused against pins.toml [toolchain] release_date; the same date or a later one is read."""
    archive = signers("archive")
    body = lzma.compress(INDEX)
    index = {f"{ARCHIVE}dists/bookworm/main/binary-amd64/Packages.xz": body}
    serve(monkeypatch, {URL: archive.sign(release(date="Mon, 01 Jun 2026 00:00:00 UTC", amd64=body)), **index})
    with pytest.raises(Refused, match=r"is dated 'Mon, 01 Jun 2026 00:00:00 UTC', older than the last one re-pinning "
                                      r"accepted \('Sat, 11 Jul 2026 10:16:37 UTC', pins.toml \[toolchain\] "
                                      r"release_date\): a replayed release; nothing re-pinned"):
        R.packages_index(ARCHIVE, "bookworm", "amd64", keyring=archive.keyring,
                         not_before="Sat, 11 Jul 2026 10:16:37 UTC")
    serve(monkeypatch, {URL: archive.sign(release(amd64=body)), **index})
    assert R.packages_index(ARCHIVE, "bookworm", "amd64", keyring=archive.keyring,
                            not_before="Sat, 11 Jul 2026 10:16:37 UTC") == INDEX
    assert R.accepted_date(ARCHIVE, "bookworm", keyring=archive.keyring) == "Sat, 11 Jul 2026 10:16:37 UTC"
    assert P.load().toolchain is not None and "release_date" in tomllib.loads(P.PINS_FILE.read_text())["toolchain"]
