"""`pip install .` gives a working oeq-wheels outside the checkout (pipeline + runtime + data files)."""
import os
import subprocess
import sys


from support import REPO


def checkout_copy(dest):
    """The working tree as git sees it, copied: setuptools writes build/ and *.egg-info into the source tree."""
    dest.mkdir()
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, check=True).stdout
    tar = subprocess.run(["tar", "--null", "--no-recursion", "-T", "-", "-cf", "-"], cwd=REPO, input=files,
                         capture_output=True, check=True).stdout
    subprocess.run(["tar", "-xf", "-"], cwd=dest, input=tar, check=True)
    return dest


def ignored():
    return subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=REPO, capture_output=True,
                          text=True).stdout


def test_pip_install_dot_gives_a_working_cli_outside_the_checkout(tmp_path, cp311_wheel, cp311_oeq_wheel):
    before = ignored()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    src = checkout_copy(tmp_path / "src")
    r = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "."], capture_output=True, text=True, env=env, cwd=src)
    assert r.returncode == 0, r.stderr[-3000:]
    assert ignored() == before  # nothing written into the repository
    cli = str(venv / "bin" / "oeq-wheels")
    r = subprocess.run([cli, "--help"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0 and "install-matrix" in r.stdout and "publish" in r.stdout
    # The whole gate, run from the installed package: pins, runtime file list, packaging licence.
    r = subprocess.run([cli, "verify", str(cp311_wheel), str(cp311_oeq_wheel)], capture_output=True, text=True,
                       env=env, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.count("OK ") == 2, r.stdout + r.stderr
    code = ("import fastmace_oeq_ext, oeq_wheels.ext.assemble as a; "
            "print(a.PACKAGING_LICENSE.is_file(), fastmace_oeq_ext.__file__, a.RUNTIME_DIR)")
    r = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, env=env,
                       cwd=tmp_path)
    ok, runtime_file, runtime_dir = r.stdout.split()
    assert ok == "True" and str(venv) in runtime_file and str(venv) in runtime_dir, r.stdout + r.stderr
