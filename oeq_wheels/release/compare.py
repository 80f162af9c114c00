"""Two builds of the same wheels compared by what the gate checks, then by bytes.

The release builds the aarch64 wheels twice: cross-compiled on x86_64 in the pinned build root (Debian's
aarch64-linux-gnu-g++ 12.2) and natively on an arm runner in the pinned arm64 build root (Debian's g++ 12.2, the
same binutils 2.40). What a user's machine sees is compared first, so that a difference says what it is: the file
list, the metadata, each library's architecture, NEEDED, RUNPATH, the symbols it takes from torch, CUDA and glibc
(with their versions), auditwheel's tag and torch-abi-audit's verdict. The release then asks for the same bytes
(--bytes): the native build is an independent reproduction of the published files, never a source of them.
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

from fastmace_oeq_ext.oeq_build import FILE_NAME as OEQ_BUILD_FILE

from .. import pins as pins_mod, elf, tags
from ..errors import CompareError
from ..files import sha256_file


def facts(wheel: Path, pins: pins_mod.Pins) -> dict:
    """What the gate sees of one binary openequivariance wheel (it must pass the gate first)."""
    from ..oeq.gate import verify_oeq_binary
    v = verify_oeq_binary(wheel, pins)
    if not v.ok:
        raise CompareError(f"{wheel.name} fails the gate: {'; '.join(v.problems)}")
    out = {"auditwheel": v.facts["auditwheel_sym_tag"], "torch-abi-audit": v.facts["torch_abi_audit"]}
    with zipfile.ZipFile(wheel) as zf:
        out["files"] = sorted(zf.namelist())
        for name in out["files"]:
            data = zf.read(name)
            if name.endswith(".so"):
                facts = elf.elf_facts(data)
                out[name] = {"machine": facts["machine"], "needed": facts["needed"], "runpath": facts["runpath"],
                             "imports": sorted(f"{n}@{ver}" if ver else n
                                               for n, ver in elf.dynamic_symbols(data, defined=False))}
            elif name.endswith(OEQ_BUILD_FILE):  # the same pinned inputs; the compiler and the hashes differ
                record = json.loads(data)
                out[name] = {k: json.dumps(v) for k, v in record.items() if k not in ("compiler", "files")}
            elif not name.endswith("/RECORD"):
                out[name] = data  # the sdist's files, METADATA, WHEEL: byte for byte
    return out


def compare(a: Path, b: Path, pins: pins_mod.Pins) -> list[str]:
    """How the gate's view of b differs from a's (empty: the same wheel as far as a user's machine can tell)."""
    fa, fb = facts(a, pins), facts(b, pins)
    out = []
    for key in sorted(set(fa) | set(fb)):
        if fa.get(key) == fb.get(key):
            continue
        if isinstance(fa.get(key), dict) and isinstance(fb.get(key), dict):
            for sub in sorted(set(fa[key]) | set(fb[key])):
                x, y = fa[key].get(sub), fb[key].get(sub)
                if x != y:
                    if isinstance(x, list) and isinstance(y, list):
                        out.append(f"{key}: {sub} only in {a.parent.name}: {sorted(set(x) - set(y))[:8]}, "
                                   f"only in {b.parent.name}: {sorted(set(y) - set(x))[:8]}")
                    else:
                        out.append(f"{key}: {sub} {x!r} vs {y!r}")
        elif isinstance(fa.get(key), bytes) or isinstance(fb.get(key), bytes):
            out.append(f"{key} differs")
        else:
            out.append(f"{key}: {fa.get(key)!r} vs {fb.get(key)!r}")
    return out


def run(first: Path, second: Path, arches: list[str] | None = None, same_bytes_required: bool = False) -> int:
    """Every binary openequivariance wheel of `first` (a directory, e.g. OUTDIR-extra) against the same-named
    wheel of `second`; only those of the given architectures (default: every one in `second`). With
    same_bytes_required (the release: both builds use the pinned Debian build root's GCC and binutils, so an
    independent build must reproduce the release's bytes), a wheel whose bytes differ stops it, naming the file."""
    pins = pins_mod.load()
    pick = lambda d: {w.name: w for w in sorted(Path(d).glob("openequivariance-*.whl"))
                      if arches is None or tags.wheel_arch(w.name) in arches}
    a, b = pick(first), pick(second)
    if not b:
        raise CompareError(f"{second} holds no openequivariance wheel{' for ' + ','.join(arches) if arches else ''}")
    arches = arches or sorted({tags.wheel_arch(n) for n in b})  # the second build's architectures, both ways
    a = {n: w for n, w in a.items() if tags.wheel_arch(n) in arches}
    missing = sorted(set(b) - set(a))
    if missing:
        raise CompareError(f"{first} lacks {', '.join(missing)}; build it there first")
    short = sorted(set(a) - set(b))
    if short:
        raise CompareError(f"{second} lacks {', '.join(short)} of {first}'s {','.join(arches)} wheels: the two builds "
                           "must hold the same set")
    bad = 0
    for name in sorted(b):
        diff = compare(a[name], b[name], pins)
        same_bytes = a[name].read_bytes() == b[name].read_bytes()
        print(f"{'SAME' if not diff else 'DIFF'} {name}{' (byte-identical)' if same_bytes else ''}")
        for d in diff:
            print(f"     - {d}")
        bad += bool(diff)
    if bad:
        raise CompareError(f"{bad} of {len(b)} wheels differ in what the gate checks")
    differ = [n for n in sorted(b) if sha256_file(a[n]) != sha256_file(b[n])]
    if differ and same_bytes_required:
        raise CompareError(f"the second build does not reproduce the release's bytes: {', '.join(differ)} "
                           f"({first} vs {second}); nothing is published: find what the two builds did differently "
                           "(docs/releasing.md, \"The native aarch64 build\")")
    return 0
