"""The plain-install check: `pip install torch==<the release torch> fastmace-oeq-ext` with every compiler gone.

.ci/run keeps the uv case here (FastMACE's torch) with the mixed pair (the cu128 index beside a CUDA 13
torch: refused in one line), and the pip case in test_index_server.py (fastmace-oeq-ext from a real
index server) and test_rehearse.py (README's line); `make install-matrix` runs every line's torches
with pip and uv.
"""

import pytest

from oeq_wheels.checks import installmatrix, venvs

from oeq_wheels import pins as P

pytestmark = pytest.mark.big_disk  # multi-GB trees for a while: one unit with the others like it (tests/support/plugin.py)

OEQ = P.load().oeq.version
CU12 = P.load().oeq_line("cu128").version(OEQ)


def test_plain_uv_install_needs_no_compiler_and_the_mix_is_refused(cp311_wheel, cp311_oeq_wheel,
                                                                   cp311_oeq_cu12_wheel, capsys):
    # uv, a fresh venv, compilers replaced by sentinels before the install; raises on any failure.
    assert installmatrix.run(cp311_wheel.parent, [P.load().matrix.torch_version], ["uv"], "3.11",
                             arches=["x86_64"], emulated_pythons=[]) == 0  # aarch64: test_aarch64.py; Debian
    # testing's CPythons (the stable-ABI wheel, not built here): test_debian_testings_newer_cpythons_...
    table = capsys.readouterr().out
    assert "cu128 (mix)" in table and f"refused: host extension: unusable; openequivariance {CU12}" \
        in table


@pytest.mark.parametrize("python, installer", [("3.14", "uv"), ("3.15", "pip")])
def test_debian_testings_newer_cpythons_install_the_stable_abi_wheel_without_any_compiler(abi3_oeq_wheel, python,
                                                                                          installer, capsys,
                                                                                          tmp_path, record_property):
    """CPythons no build here has (Debian testing's 3.14 and 3.15, in a root of their own through bubblewrap):
    a plain pip or uv install of PyPI's newest tested torch and openequivariance from the served cu130 index, every
    compiler a sentinel before it, takes our cp312-abi3 wheel; OEq loads oeq_stable_cuda.abi3.so with its
    operators; nothing is built. `make install-matrix` also runs the matrix's torch on 3.14 and each with both installers."""
    newest = P.load().oeq_line("cu130").tested_torch[-1]
    # uv's cache of this install is the test's own, and the stack is no other test's: NVIDIA's wheels and Triton come
    # as stand-ins (their metadata, resolved as PyPI's; ~2 GB PyPI never sends), load stubs in their libraries' place.
    assert installmatrix.run(abi3_oeq_wheel.parent.with_name("dist"), [newest], [installer], "3.11",
                             arches=["x86_64"], emulated_pythons=[python], plain=False,
                             uv_cache=tmp_path / "uv-cache", standins=True) == 0
    table = capsys.readouterr().out
    assert f"{newest}  cu130 py{python} (Debian forky)  {installer}" in table and \
        "OEq precompiled (our oeq_stable_cuda.abi3.so)" in table and "PASS" in table
    # The exact set of stubs (loader_stubs.make holds it to what the install's files NEED and lack), printed in the
    # proof table's row; a run with NVIDIA's wheels whole (OEQ_WHEELS_PYPI_MIRROR=off) is the stronger pass.
    (stubs,) = installmatrix.stubs_shown(table)
    assert stubs or venvs.standin_url() is None, table
    record_property("load stubs", stubs)


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_a_free_threaded_cpython_installs_its_own_wheel_and_keeps_the_gil_off(ft_oeq_wheel, installer, capsys,
                                                                              tmp_path, record_property):
    """CPython 3.14t (free-threaded, built here from its pinned source: inputs/freethreaded.py) loads no abi3
    module: a plain pip or uv install of PyPI's newest torch with a cp314t wheel and openequivariance from the served
    cu130 index, every compiler a sentinel before it, takes our cp314-cp314t wheel; OEq loads
    oeq_stable_cuda.cpython-314t-*.so with its operators, nothing is built, and the import leaves the GIL off (the
    module declares Py_MOD_GIL_NOT_USED). `make install-matrix` runs each pinned torch of it with both installers."""
    ft = P.load().freethreaded["3.14t"]
    newest = ft.torch[-1]
    assert installmatrix.run(ft_oeq_wheel.parent.with_name("dist"), [newest], [installer], "3.11",
                             arches=["x86_64"], emulated_pythons=["3.14t"], plain=False,
                             uv_cache=tmp_path / "uv-cache", standins=True) == 0
    table = capsys.readouterr().out
    assert f"{newest}  cu130 py3.14t (free-threaded, built here)  {installer}" in table, table
    assert "OEq precompiled (our oeq_stable_cuda.cpython-314t-x86_64-linux-gnu.so; the GIL stays off)" in table, table
    assert table.count("PASS") == 1, table  # the cu128 line's cp314t wheel: built and gated, installed by no row here
    (stubs,) = installmatrix.stubs_shown(table)
    assert stubs or venvs.standin_url() is None, table
    record_property("load stubs", stubs)


def test_one_variant_index_gives_each_driver_its_line_with_uv_and_pip_reads_none(cp311_oeq_wheel, cp311_oeq_cu12_wheel,
                                                                                capsys, tmp_path, record_property):
    """PEP 825 wheel variants, proven with uv itself (oeq_wheels/checks/variant_index.py): one --extra-index-url, the
    site's /variants/simple/; a driver of CUDA 13 presented (uv's provider override, then a stand-in nvidia-smi on
    PATH) with FastMACE's torch gets the cu13 variant, one of CUDA 12.8 with the cu128 line's torch the cu12 one;
    each loads with every compiler a sentinel. With no driver, or without the preview flag, uv refuses (the release
    "cannot be used"); pip reads no variant wheel and finds none there."""
    from oeq_wheels.checks import variant_index
    from oeq_wheels.oeq import variants
    assert variant_index.run(cp311_oeq_wheel.parent.with_name("dist"), "3.11", standins=True,
                             uv_cache=tmp_path / "uv-cache") == 0
    table = capsys.readouterr().out
    pins = P.load()
    for line in (pins.oeq_line("cu130"), pins.oeq_line("cu128")):
        for how in variant_index.DRIVERS:
            assert f"{line.name} via variants (driver {line.cuda} by {how})" in table, table
    assert table.count("OEq precompiled (our binary wheel") == 4 and table.count("PASS") == 7, table
    refused = [row for row in table.splitlines() if "refused: " in row]
    assert len(refused) == 3 and all(f"openequivariance=={pins.oeq.version}+" in r for r in refused[:2]) and \
        variant_index.PIP_SKIPS in refused[2], table
    record_property("load stubs", sorted({s for row in installmatrix.stubs_shown(table) for s in row}))
    assert variants.release_version(pins).endswith(pins.variants.local_version)
