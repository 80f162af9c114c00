import pytest

from oeq_wheels.inputs import pythons


def test_discovers_every_pinned_python():
    for v in ("3.10", "3.11", "3.12", "3.13"):
        i = pythons.find(v)
        assert i.version == v and i.cp_tag == "cp" + v.replace(".", "")
        assert i.full_version.startswith(v + ".")


def test_missing_python_names_what_was_found(monkeypatch):
    with pytest.raises(pythons.PythonNotFound) as e:
        pythons.find_all(["3.11", "3.99"])
    msg = str(e.value)
    assert "3.99" in msg and "Found:" in msg and "3.11 (" in msg


def test_a_release_torch_without_a_cpython_narrows_fastmace_oeq_ext_only():
    """As after `make pins ARGS="--torch 9.3.0 --python 3.11,3.12,3.13"` (a torch release with no cp310 wheel)."""
    import dataclasses
    from oeq_wheels import build, pins as P
    pins = P.load()
    narrowed = dataclasses.replace(pins, matrix=dataclasses.replace(pins.matrix, pythons=pins.matrix.pythons[1:]))
    lines = sorted({v for l in pins.oeq_lines for v in l.pythons})
    every = build.check_arch_names(pins, None)
    ext_pythons = lambda plan: [w.python for product, parts in plan.parts if product.NAME == "fastmace-oeq-ext"
                                for part in parts for w in part.wheels]
    everything = build.plan(narrowed, None, every)
    assert sorted(everything.pythons) == sorted(set(lines) | set(ext_pythons(everything)))
    assert ext_pythons(everything) == list(pins.matrix.pythons[1:])
    first = build.plan(narrowed, [pins.matrix.pythons[0]], every)
    assert first.pythons == [pins.matrix.pythons[0]] and ext_pythons(first) == []
    with pytest.raises(P.PinsError, match=r"Python 3.99 is not in matrix .* or the OEq lines"):
        build.plan(narrowed, ["3.99"], every)


def test_headers_that_are_not_the_pinned_ones_stop_a_pinned_build_in_one_line(tmp_path, monkeypatch, capsys):
    """A CPython whose headers differ from [toolchain.pythons] is an input the pins do not name: a build of the pinned
    toolchain stops naming both digests and the fix; --toolchain host, or a build host of another architecture than
    the headers' (pyconfig.h differs), goes on with a note; the pinned headers go on silently."""
    import dataclasses
    from oeq_wheels import build, pins as P, toolchain
    from oeq_wheels.errors import BuildError
    include = tmp_path / "include" / "python3.11"
    include.mkdir(parents=True)
    (include / "Python.h").write_text("/* not the pinned CPython */\n")
    (include / "pyconfig.h").write_text("#define HAVE_NOTHING 1\n")
    pins = P.load()
    full = pins.toolchain.pythons["3.11"][0]  # the pinned version, its headers not the pinned ones
    interp = pythons.Interpreter("3.11", full, "/nowhere/bin/python3.11", str(include))
    digest = pythons.headers_digest(include)
    monkeypatch.setattr(toolchain, "host_arch", lambda: "x86_64")
    with pytest.raises(BuildError) as exc:
        build.pythons_with_headers(pins, {"3.11": interp}, tmp_path / "cache")
    line = str(exc.value)
    assert "\n" not in line and line.startswith(
        f"CPython {full}'s headers (/nowhere/bin/python3.11: {digest[:12]}) are not the pinned ones "
        f"({full}: {pins.toolchain.pythons['3.11'][1][:12]}), so its wheels would not be the released bytes; "
        f"install CPython {full} where the build finds it first"), line
    assert "[toolchain.pythons]" in line and "--toolchain host" in line
    capsys.readouterr()
    for how in ("host", "pinned-on-arm64"):
        monkeypatch.setattr(toolchain, "host_arch", lambda arch="x86_64" if how == "host" else "aarch64": arch)
        got = build.pythons_with_headers(pins, {"3.11": interp}, tmp_path / "cache",
                                         "host" if how == "host" else "pinned")
        assert got["3.11"].include.endswith(f"headers-{digest[:16]}/python3.11")
        assert f"NOTE: CPython {full}'s headers" in capsys.readouterr().err, how
    monkeypatch.setattr(toolchain, "host_arch", lambda: "x86_64")
    pinned = dataclasses.replace(pins, toolchain=dataclasses.replace(pins.toolchain,
                                                                     pythons={"3.11": (full, digest)}))
    assert build.pythons_with_headers(pinned, {"3.11": interp}, tmp_path / "cache")["3.11"].include.endswith("python3.11")
    assert "NOTE" not in capsys.readouterr().err


def test_a_free_threaded_cpythons_headers_count_only_what_python_h_reads_of_its_pyconfig(tmp_path):
    """A free-threaded CPython is configured on the build host (oeq_wheels/inputs/freethreaded.py), whose pyconfig.h
    also says which libraries that host has: its pinned digest counts only the #defines Python.h, or a header it
    includes, names; another host's curses or readline does not stop the build, another Py_GIL_DISABLED does."""
    include = tmp_path / "python3.14t"
    (include / "cpython").mkdir(parents=True)
    (include / "Python.h").write_text('#include "pyconfig.h"\n#include "cpython/object.h"\n')
    (include / "cpython" / "object.h").write_text("#ifdef Py_GIL_DISABLED\n#endif\n")
    (include / "py_curses.h").write_text("#ifdef HAVE_CURSES_H\n#endif\n")  # no extension's compile includes it
    def digest(pyconfig):
        (include / "pyconfig.h").write_text(pyconfig)
        return pythons.headers_digest(include, abi_only=True)
    base = digest("#define Py_GIL_DISABLED 1\n#define HAVE_CURSES_H 1\n")
    assert pythons.abi_pyconfig(include) == b"#define Py_GIL_DISABLED 1"
    assert digest("#define HAVE_CURSES_H 1\n/* another host */\n#define Py_GIL_DISABLED 1\n") == base
    assert digest("#define Py_GIL_DISABLED 1\n") == base
    assert digest("#define HAVE_CURSES_H 1\n") != base
    assert pythons.headers_digest(include) != pythons.headers_digest(include, abi_only=True)  # GIL builds: every byte
