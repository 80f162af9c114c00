"""verify_wheel refuses damaged or inconsistent wheels; the gate picks each product's by the wheel's name."""
import ast
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from support import REPO
from support.artifacts import forgeries, with_package_file
from fastmace_oeq_ext import manifest as mf
from support.artifacts import as_schema_3
from oeq_wheels import gate, gate_common
from oeq_wheels.ext.gate import verify_wheel


def _rewrite(src, dst, change):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            data = change(info.filename, zin.read(info.filename))
            if data is not None:
                zout.writestr(info, data)


def test_good_wheel_verifies(cp311_wheel):
    v = verify_wheel(cp311_wheel)
    assert v.ok, v.problems


def test_tampered_library_fails_record(cp311_wheel, tmp_path):
    bad = tmp_path / cp311_wheel.name
    _rewrite(cp311_wheel, bad, lambda n, d: d + b"\0" if n.endswith(".so") else d)
    v = verify_wheel(bad, twine=False)
    assert not v.ok and any("RECORD" in p for p in v.problems)


def test_manifest_mismatch_is_caught(cp311_wheel, tmp_path):
    def lying(text):  # the library's sha256, under post1's name (its one name); the RECORD stays consistent
        return json.dumps({**json.loads(text), "sha256": "0" * 64})
    v = verify_wheel(with_package_file(cp311_wheel, tmp_path, "manifest.json", lying), twine=False)
    assert any("manifest's library sha256" in p for p in v.problems)


def test_a_fact_told_twice_or_a_compiler_record_of_its_own_is_refused(cp311_wheel, tmp_path):
    """The runtime still reads schema 3 (each twin agreeing), but a wheel this build ships has each fact once; and
    BUILD_COMPILER.txt is the manifest's compiler and flags, nothing else."""

    def schema_3_text(text):
        data = as_schema_3(text)
        assert mf.Manifest.from_json(json.dumps(data)) == mf.Manifest.from_json(text)  # readable, and agreeing
        return json.dumps(data, indent=2, sort_keys=True) + "\n"
    v = verify_wheel(with_package_file(cp311_wheel, tmp_path / "a", "manifest.json", schema_3_text), twine=False)
    assert any("manifest.json is not what this build writes" in p for p in v.problems), v.problems
    v = verify_wheel(with_package_file(cp311_wheel, tmp_path / "b", "BUILD_COMPILER.txt",
                                        lambda t: "g++ (Other) 1.0\n" + t), twine=False)
    assert v.problems == ["BUILD_COMPILER.txt is not the manifest's compiler and flags"], v.problems


def test_overclaimed_tag_is_refused(cp311_wheel, tmp_path):
    older = tmp_path / cp311_wheel.name.replace("manylinux_2_28", "manylinux_2_17")
    shutil.copy(cp311_wheel, older)
    v = verify_wheel(older, twine=False)
    assert any("auditwheel proves only" in p or "platform tag" in p for p in v.problems)


def test_the_common_part_imports_no_product_and_the_gate_picks_by_name(cp311_wheel, cp311_oeq_wheel):
    """gate_common.py is what both products' gates build on, so it imports neither (no circle); gate.verify_any sends
    each wheel to its own product's gate (the other one refuses it: no manifest, or no OEq tree)."""
    source = Path(gate_common.__file__).read_text()
    imported = {n.module for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom) and n.module}
    assert not [m for m in imported if m.split(".")[0] in ("ext", "oeq")], imported
    assert gate.verify_any(cp311_wheel).ok and gate.verify_any(cp311_oeq_wheel).ok
    assert not verify_wheel(cp311_oeq_wheel).ok


@pytest.mark.parametrize("kind", ["injected", "duplicate", "oversized"])
def test_a_consistent_forgery_is_refused_by_verify_in_one_line_and_bounded_memory(cp311_wheel, tmp_path, kind):
    wheel, why = forgeries(cp311_wheel, tmp_path)[kind]
    code = ("import re, runpy, sys; open('/proc/self/clear_refs', 'w').write('5'); sys.argv = ['oeq_wheels', 'verify', "
            "sys.argv[1]]\ntry:\n    runpy.run_module('oeq_wheels', run_name='__main__')\nexcept SystemExit as e:\n"
            "    print('rc', e.code)\nprint('peak', re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())[1])")
    r = subprocess.run([sys.executable, "-c", code, str(wheel)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "runtime")])))
    lines = r.stdout.splitlines()
    assert f"FAIL {wheel.name}" in lines and "rc 1" in lines, r.stdout + r.stderr
    (problem,) = [line for line in lines if line.startswith("     - ")]
    assert why in problem
    assert int(lines[-1].split()[1]) < 200 << 10  # KiB: the member is never held (the report: 556 MB)
