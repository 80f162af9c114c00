"""`oeq-wheels pins` against PyPI itself: today's pins are there, the newest torch re-pins from it, and --records
re-pins a RECORD and a stub table from one full download."""
import re
import tomllib

import pytest

from support.cli import run_cli
from oeq_wheels import pins as P


@pytest.fixture
def pins_copy(tmp_path):
    path = tmp_path / "pins.toml"
    path.write_text(P.PINS_FILE.read_text())
    return path


def test_todays_pins_are_all_on_pypi_and_the_newest_torch_repins_from_it(pins_copy):
    r = run_cli("pins", "--check")
    assert r.returncode == 0 and "pinned files are on https://pypi.org/simple/" in r.stdout, r.stderr
    # A real re-pin: PyPI's JSON API and range reads on its file host, into a copy.
    newest = P.load().oeq_binary.tested_torch[-1]
    r = run_cli("pins", "--pins", str(pins_copy), "--torch", newest)
    if r.returncode != 0:  # a torch without a wheel for a pinned CPython: one line names the ones it has
        have = re.search(r"\(it has: ([^)]+)\)", r.stderr)
        assert have, r.stderr
        pys = [f"3.{c[3:]}" for c in have.group(1).split(", ") if f"3.{c[3:]}" in P.load().matrix.pythons]
        r = run_cli("pins", "--pins", str(pins_copy), "--torch", newest, "--python", ",".join(pys))
    assert r.returncode == 0, r.stderr
    new = P.load(path=pins_copy)
    assert new.matrix.torch_version == newest and new.matrix.torch_local.startswith("cu")
    assert new.matrix.consumer_torch == f"{newest}+{new.matrix.torch_local}"
    assert all(n.version for n in new.matrix.nvidia)


def test_records_pins_the_sha256_of_each_new_wheels_record_from_one_full_download(pins_copy):
    """`pins --records` on a copy whose (small) crt wheel lost its RECORD pin: downloaded whole from PyPI through
    pip's hash checking, its RECORD's sha256 is the one pinned today; nothing else changes."""
    data = tomllib.loads(pins_copy.read_text())
    ref = next(r for r in data["nvidia"] if r.startswith("nvidia-cuda-crt=="))
    pinned = data["nvidia"][ref]["record"]
    text = pins_copy.read_text()
    start = text.index(f'[nvidia."{ref}"]')
    at = text.index(f'record = "{pinned}"\n', start)
    pins_copy.write_text(text[:at] + text[at + len(f'record = "{pinned}"\n'):])
    assert P.load(path=pins_copy) != P.load()
    r = run_cli("pins", "--pins", str(pins_copy), "--records")
    assert r.returncode == 0, r.stderr
    assert pins_copy.read_text() == P.PINS_FILE.read_text()


def test_records_pins_the_stub_digests_of_a_wheels_libraries_from_one_full_download(pins_copy):
    """`pins --records` on a copy that lost the [stubs] table of the (small) CUDA runtime wheel: downloaded whole
    from PyPI, its libcudart's view digest and table places are the ones pinned today."""
    release = P.load()
    (cudart,) = [n for n in release.matrix.nvidia if n.name == "nvidia-cuda-runtime"]
    assert cudart.stubs and cudart.stubs[0].tables  # NVIDIA's tables lie at the start: pinned with their places
    text = pins_copy.read_text()
    start = text.index(f'[stubs."{cudart.file}"]')
    end = text.index("\n\n", start) + 2
    pins_copy.write_text(text[:start] + text[end:])
    assert not next(n for n in P.load(path=pins_copy).matrix.nvidia if n.name == cudart.name).stubs
    r = run_cli("pins", "--pins", str(pins_copy), "--records")
    assert r.returncode == 0, r.stderr
    assert tomllib.loads(pins_copy.read_text()) == tomllib.loads(P.PINS_FILE.read_text())
