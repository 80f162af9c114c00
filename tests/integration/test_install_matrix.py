"""The plain-install check: `pip install torch==<the release torch> fastmace-oeq-ext` with every compiler gone.

.ci/run keeps the uv case here (FastMACE's torch, then PyPI's CUDA 12 torch beside the same OEq wheel), and the pip
case in test_index_server.py (fastmace-oeq-ext from a real index server) and test_rehearse.py (README's line);
`make install-matrix` runs every torch of the line with pip and uv.
"""

import re

import pytest

from oeq_wheels.checks import installmatrix, venvs

from oeq_wheels import pins as P

pytestmark = pytest.mark.big_disk  # multi-GB trees for a while: one unit with the others like it (tests/support/plugin.py)

LINE = P.load().oeq_binary


def test_plain_uv_install_needs_no_compiler(cp311_wheel, cp311_oeq_wheel, capsys):
    # uv, a fresh venv, compilers replaced by sentinels before the install; raises on any failure.
    assert installmatrix.run(cp311_wheel.parent, [P.load().matrix.torch_version], ["uv"], "3.11",
                             arches=["x86_64"], emulated_pythons=[]) == 0  # aarch64: test_aarch64.py; Debian
    # testing's CPythons (the stable-ABI wheel, not built here): test_debian_testings_newer_cpythons_...
    table = capsys.readouterr().out
    assert "(mix)" not in table and table.count("PASS") == 1 and "CUDA 13 bound" in table, table


def test_the_same_wheel_installs_beside_pypis_cuda12_torch_from_the_one_index(cp311_wheel, cp311_oeq_wheel, capsys,
                                                                              tmp_path, record_property):
    """PyPI's CUDA 12.8 torch (the line's floor) and openequivariance from the one index, uv, every compiler a sentinel: the
    same cp311 wheel as beside FastMACE's CUDA 13 torch installs and loads its precompiled module, its dispatch
    library binding CUDA 12's libraries (stand-ins here: NVIDIA's wheels as their metadata, load stubs in their
    libraries' place, NVRTC and cuBLAS beside the runtime's stub as the dispatch library finds them)."""
    cu12 = LINE.tested_torch[0]
    assert installmatrix.run(cp311_wheel.parent, [cu12], ["uv"], "3.11", arches=["x86_64"], emulated_pythons=[],
                             uv_cache=tmp_path / "uv-cache", standins=True) == 0
    table = capsys.readouterr().out
    assert re.search(rf"^{re.escape(cu12)} +{LINE.name} +uv ", table, re.M) and table.count("PASS") == 1 and \
        "CUDA 12 bound" in table, table
    (stubs,) = installmatrix.stubs_shown(table)
    assert stubs or venvs.standin_url() is None, table
    assert not stubs or {"libcudart.so.12", "libnvrtc.so.12", "libcublas.so.12"} <= set(stubs), stubs
    record_property("load stubs", stubs)


@pytest.mark.parametrize("python, installer", [("3.14", "uv"), ("3.15", "pip")])
def test_debian_testings_newer_cpythons_install_the_stable_abi_wheel_without_any_compiler(abi3_oeq_wheel, python,
                                                                                          installer, capsys,
                                                                                          tmp_path, record_property):
    """CPythons no build here has (Debian testing's 3.14 and 3.15, in a root of their own through bubblewrap):
    a plain pip or uv install of PyPI's newest tested torch and openequivariance from the served index, every
    compiler a sentinel before it, takes our cp312-abi3 wheel; OEq loads oeq_stable_cuda.abi3.so with its
    operators; nothing is built. `make install-matrix` also runs the matrix's torch on 3.14 and each with both installers."""
    newest = LINE.tested_torch[-1]
    # uv's cache of this install is the test's own, and the stack is no other test's: NVIDIA's wheels and Triton come
    # as stand-ins (their metadata, resolved as PyPI's; ~2 GB PyPI never sends), load stubs in their libraries' place.
    assert installmatrix.run(abi3_oeq_wheel.parent.with_name("dist"), [newest], [installer], "3.11",
                             arches=["x86_64"], emulated_pythons=[python], plain=False,
                             uv_cache=tmp_path / "uv-cache", standins=True) == 0
    table = capsys.readouterr().out
    assert f"{newest}  {LINE.name} py{python} (Debian forky)  {installer}" in table and \
        "OEq precompiled (our oeq_stable_cuda.abi3.so; CUDA 13 bound" in table and "PASS" in table
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
    index, every compiler a sentinel before it, takes our cp314-cp314t wheel; OEq loads
    oeq_stable_cuda.cpython-314t-*.so with its operators, nothing is built, and the import leaves the GIL off (the
    module declares Py_MOD_GIL_NOT_USED). `make install-matrix` runs each pinned torch of it with both installers."""
    ft = P.load().freethreaded["3.14t"]
    newest = ft.torch[-1]
    assert installmatrix.run(ft_oeq_wheel.parent.with_name("dist"), [newest], [installer], "3.11",
                             arches=["x86_64"], emulated_pythons=["3.14t"], plain=False,
                             uv_cache=tmp_path / "uv-cache", standins=True) == 0
    table = capsys.readouterr().out
    assert f"{newest}  {LINE.name} py3.14t (free-threaded, built here)  {installer}" in table, table
    assert "OEq precompiled (our oeq_stable_cuda.cpython-314t-x86_64-linux-gnu.so; CUDA 13 bound; the GIL stays off)" in table, table
    assert table.count("PASS") == 1, table
    (stubs,) = installmatrix.stubs_shown(table)
    assert stubs or venvs.standin_url() is None, table
    record_property("load stubs", stubs)
