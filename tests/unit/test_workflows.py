"""The CI workflows pass actionlint and zizmor (both from PyPI); the checks do catch bad workflows."""
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO
from oeq_wheels import pins as P

BIN = Path(sys.executable).parent
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))


def tool(name):
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{name} is not installed in the test venv (requirements/test.txt)")
    return str(path)


def test_both_workflows_exist():
    assert {p.name for p in WORKFLOWS} == {"release.yml", "test.yml"}


def test_actionlint_clean():
    r = subprocess.run([tool("actionlint"), *map(str, WORKFLOWS)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_zizmor_clean():
    r = subprocess.run([tool("zizmor"), "--offline", str(REPO / ".github")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_third_party_action_is_pinned_by_sha():
    import re
    for wf in WORKFLOWS:
        for ref in re.findall(r"uses:\s*([^\s#]+)", wf.read_text()):
            if ref.startswith("./"):  # a workflow of this repository, at this very commit
                continue
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), f"{wf.name}: {ref}"


BAD = """name: bad
on: [push]
permissions: write-all
jobs:
  x:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
      - run: echo "${{ github.event.head_commit.message }}"
"""


def test_the_linters_catch_a_bad_workflow(tmp_path):
    d = tmp_path / ".github" / "workflows"
    d.mkdir(parents=True)
    (d / "bad.yml").write_text(BAD)
    z = subprocess.run([tool("zizmor"), "--offline", str(d)], capture_output=True, text=True)
    assert z.returncode != 0 and ("unpinned" in z.stdout + z.stderr or "excessive" in z.stdout + z.stderr)
    (d / "broken.yml").write_text("on: push\njobs:\n  x:\n    steps: []\n")
    a = subprocess.run([tool("actionlint"), str(d / "broken.yml")], capture_output=True, text=True)
    assert a.returncode != 0 and "runs-on" in a.stdout


def test_release_uploads_only_fastmace_to_pypi_and_attaches_the_oeq_wheels():
    text = (REPO / ".github" / "workflows" / "release.yml").read_text()
    build, rest = text.split("\n  publish-pypi:", 1)
    pypi, gh = rest.split("\n  github-release:", 1)
    # PyPI gets the `wheels` artifact, which holds dist/*.whl (fastmace-oeq-ext) only.
    assert "name: wheels\n          path: dist/*.whl" in build and "name: wheels" in pypi
    assert "oeq-wheels" not in pypi and "dist-extra" not in pypi
    # The binary OEq wheels and SHA256SUMS are built, kept and attached to the release.
    assert "path: |\n            dist-extra/*.whl\n" in build and \
        "dist-extra/SHA256SUMS" in build  # the line's wheels and the fastmace-oeq-ext builds that name it
    assert "make install-matrix" in build and "x86_64_torches" in build  # CUDA 13 and 12 torches (release_plan), before
    # anything is published
    assert "oeq_wheels rehearse dist" in build  # the hosting and README's line, rehearsed before publishing
    assert "release-files/SHA256SUMS" in gh and "dist-extra/*.whl" in gh


PUBLISHING = ("preflight", "attest", "publish-pypi", "github-release", "pages")
TAG_PUSH = "github.event_name == 'push' && startsWith(github.ref, 'refs/tags/v')"


def downloads(job: dict) -> dict:
    """The artifacts a job downloads: name -> folder (every download names one artifact)."""
    steps = [s for s in job["steps"] if s.get("uses", "").startswith("actions/download-artifact@")]
    assert all(set(s["with"]) == {"name", "path"} for s in steps), steps  # no pattern, no merge-multiple
    return {s["with"]["name"]: s["with"]["path"] for s in steps}


def test_each_job_downloads_by_name_and_the_native_build_is_never_published():
    """Item 1 of the last mile: an unnamed, merged download took the native aarch64 wheels (same names, other bytes)
    into the release. Every download now names its artifact and has a folder of its own; only the build job's
    comparison takes the native one."""
    jobs = load("release.yml")["jobs"]
    text = (REPO / ".github" / "workflows" / "release.yml").read_text()
    assert "merge-multiple" not in text and "pattern:" not in text
    for name, job in jobs.items():
        if "steps" in job:
            got = downloads(job)
            assert len(set(got.values())) == len(got), name  # each artifact in its own folder
            assert ("oeq-aarch64-native" in got) == (name == "build"), name
    for name in ("preflight", "github-release"):
        assert downloads(jobs[name]) == {"wheels": "dist", "oeq-wheels": "dist-extra", "release-files": "release-files"}
    assert downloads(jobs["attest"]) == {"wheels": "dist", "oeq-wheels": "dist-extra"}
    assert downloads(jobs["publish-pypi"]) == {"wheels": "dist"}
    build = " ".join(s.get("run", "") for s in jobs["build"]["steps"])
    assert "compare-builds dist-extra native-extra --arch aarch64 --bytes" in build


def test_manual_runs_publish_nothing_and_every_door_checks_the_recorded_set_first():
    """The event decides, not the ref; provenance before any upload; each uploading job re-checks what it
    downloaded against records/release.json (standard library only in the job that holds PyPI's token)."""
    jobs = load("release.yml")["jobs"]
    for name in PUBLISHING:
        assert jobs[name]["if"] == TAG_PUSH, name
    assert set(jobs["preflight"]["needs"]) == {"tag", "build", "clean-install"}
    assert jobs["attest"]["needs"] == "preflight"
    assert set(jobs["publish-pypi"]["needs"]) == {"preflight", "attest"}
    assert set(jobs["github-release"]["needs"]) == {"attest", "publish-pypi"} and jobs["pages"]["needs"] == "github-release"
    for name in ("preflight", "attest", "publish-pypi", "github-release"):
        runs = " ".join(s.get("run", "") for s in jobs[name]["steps"])
        assert "python3 -s -m oeq_wheels.release.recorded check" in runs, name
    pre = " ".join(s.get("run", "") for s in jobs["preflight"]["steps"])
    assert "--tag \"$TAG\" --complete" in pre and "--check-index" in pre and "new-assets existing" in pre
    assert "-m oeq_wheels site --out _site" in pre  # the whole site lays out with this release added
    pypi = " ".join(s.get("run", "") for s in jobs["publish-pypi"]["steps"])
    assert "bootstrap" not in pypi and "pip" not in pypi  # no third-party code beside the publishing token
    tag_runs = " ".join(s.get("run", "") for s in jobs["tag"]["steps"])
    assert "NOT PUBLISHED" in tag_runs and '"$EVENT" = push' in tag_runs


def load(name: str) -> dict:
    import yaml
    data = yaml.safe_load((REPO / ".github" / "workflows" / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def test_every_job_has_a_timeout_or_is_a_called_workflow():
    for name in ("release.yml", "test.yml"):
        for job_id, job in load(name)["jobs"].items():
            assert "timeout-minutes" in job or "uses" in job, f"{name}: job {job_id} has no timeout-minutes"


def test_release_checks_the_tag_and_publishes_only_after_tests_and_every_clean_install():
    wf = load("release.yml")
    jobs = wf["jobs"]
    assert wf["concurrency"]["cancel-in-progress"] is False and "github.ref" in wf["concurrency"]["group"]
    assert any("make check-tag" in step.get("run", "") and 'REPOSITORY="$GITHUB_REPOSITORY"' in step["run"]
               for step in jobs["tag"]["steps"])
    assert jobs["tests"]["uses"] == "./.github/workflows/test.yml"  # the same tests, on this very commit
    assert set(jobs["build"]["needs"]) == {"tag", "tests", "build-aarch64-native"}
    ci = jobs["clean-install"]
    assert ci["strategy"]["fail-fast"] is False
    assert ci["strategy"]["matrix"]["python"].startswith("${{ fromJSON(needs.tag.outputs.pythons) }}")
    assert "tag" in ci["needs"]
    assert set(jobs["preflight"]["needs"]) == {"tag", "build", "clean-install"}
    assert jobs["publish-pypi"]["environment"]["name"] == "pypi"
    assert jobs["publish-pypi"]["permissions"] == {"contents": "read", "id-token": "write"}
    # a re-run completes; preflight refused any file of ours that PyPI holds with other bytes
    assert jobs["publish-pypi"]["steps"][-1]["with"]["skip-existing"] is True
    assert jobs["github-release"]["environment"]["name"] == "release"  # protected: reviewers decide
    assert jobs["github-release"]["permissions"] == {"contents": "write"}
    release = jobs["github-release"]["steps"][-1]["run"]
    assert "gh release view" in release and "new-assets existing" in release and "gh release create" in release
    assert "--clobber" not in (REPO / ".github" / "workflows" / "release.yml").read_text()


def test_pages_deploys_the_site_laid_out_from_every_release_with_only_its_own_permissions():
    jobs = load("release.yml")["jobs"]
    pages = jobs["pages"]
    assert pages["needs"] == "github-release"  # after the clean installs, PyPI and the release
    assert pages["permissions"] == {"contents": "read", "attestations": "read", "pages": "write", "id-token": "write"}
    assert pages["environment"]["name"] == "github-pages"
    assert pages["concurrency"] == {"group": "pages", "cancel-in-progress": False}  # deployments never overlap
    assert all("pages" not in j.get("permissions", {}) and "id-token" not in j.get("permissions", {})
               for name, j in jobs.items() if name not in ("pages", "publish-pypi", "attest"))
    runs = " ".join(s.get("run", "") for s in pages["steps"])
    assert "gh release download" in runs and "--pattern SHA256SUMS" in runs
    assert "-m oeq_wheels site --out _site" in runs and '--release "$d"' in runs
    # provenance of each served file, its signer pinned: this repository's release.yml at the release's own tag
    assert 'gh attestation verify "$f" --repo "$GITHUB_REPOSITORY" --signer-workflow "$workflow"' in runs
    assert 'workflow="$GITHUB_REPOSITORY/.github/workflows/release.yml"' in runs
    assert '--source-ref "refs/tags/$tag"' in runs
    (co,) = [s for s in pages["steps"] if s.get("uses", "").startswith("actions/checkout@")]
    assert co["with"]["fetch-depth"] == 0  # the tags: each release held to its own records/release.json
    uses = [s.get("uses", "") for s in pages["steps"]]
    assert any(u.startswith("actions/upload-pages-artifact@") for u in uses)
    assert uses[-1].startswith("actions/deploy-pages@")


def test_tests_run_once_per_change_and_are_callable_by_the_release():
    wf = load("test.yml")
    assert wf["on"]["push"] == {"branches": ["main"]} and "pull_request" in wf["on"] and "workflow_call" in wf["on"]
    assert "concurrency" in wf
    job = wf["jobs"]["test"]
    runs = " ".join(step.get("run", "") for step in job["steps"])
    # The test command's own engines (through sudo), whose image is made of the pinned toolchain's packages: no
    # pulled manylinux image, whose compilers are not the pinned ones.
    assert "make test" in runs and "docker pull" not in runs and "OEQ_WHEELS_TEST_ENGINE" not in job["env"]
    assert job["env"]["OEQ_WHEELS_TEST_REQUIRE"] == "engines,emulation,act"
    (cache,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/cache@")]
    assert "hashFiles('oeq_wheels/pins.toml')" in cache["with"]["key"]
    assert "refs/tags/" in cache["if"]  # a release run never restores a cache


def test_dependabot_watches_the_pinned_actions():
    import yaml
    cfg = yaml.safe_load((REPO / ".github" / "dependabot.yml").read_text())
    assert [u["package-ecosystem"] for u in cfg["updates"]] == ["github-actions"]


def test_release_builds_aarch64_natively_in_the_pinned_arm64_root_and_holds_the_cross_build_to_it():
    jobs = load("release.yml")["jobs"]
    native = jobs["build-aarch64-native"]
    # On the arm runner itself (no container: bubblewrap runs the root there), with [toolchain.arm64]'s packages.
    assert "container" not in native and P.load().toolchain.for_host("aarch64")
    assert native["runs-on"].endswith("-arm") and native["permissions"] == {"contents": "read"}
    runs = " ".join(s.get("run", "") for s in native["steps"])
    assert "build.sh native --runner host --arch aarch64" in runs and "oeq_wheels verify native-extra/" in runs
    assert "tools/ci/userns.sh" in runs and "--toolchain" not in runs
    (py,) = [s for s in native["steps"] if s.get("uses", "").startswith("actions/setup-python@")]
    assert py["with"]["python-version-file"] == "${{ runner.temp }}/pythons"
    build = " ".join(s.get("run", "") for s in jobs["build"]["steps"])
    assert "build.sh dist --runner host" in build and "tools/ci/userns.sh" in build
    assert '--require-recorded' in build  # the release publishes only the bytes the GPU proofs ran
    (py,) = [s for s in jobs["build"]["steps"] if s.get("uses", "").startswith("actions/setup-python@")]
    assert py["with"]["python-version-file"] == "${{ runner.temp }}/pythons"  # [toolchain.pythons]' versions
    assert "compare-builds dist-extra native-extra --arch aarch64" in build
    assert '--torch $TORCHES --arch aarch64' in build  # the emulated rows, at the line's floor (release_plan)


def test_release_takes_its_pythons_and_torches_from_the_pins_not_from_its_own_text(tmp_path):
    """The tag job publishes release_plan's values; the jobs read them. With pins re-pinned (another torch, fewer
    CPythons) the plan follows, and no version of the pins is written in release.yml."""
    import json
    from support.cli import run_cli
    from oeq_wheels import pins as P
    from oeq_wheels.release.plan import release_plan
    jobs = load("release.yml")["jobs"]
    plan = next(s for s in jobs["tag"]["steps"] if s.get("id") == "plan")
    assert "oeq_wheels release-plan >> \"$GITHUB_OUTPUT\"" in plan["run"]
    assert set(jobs["tag"]["outputs"]) == {"pythons", "x86_64_torches", "aarch64_torches"}
    matrix_steps = [s for s in jobs["build"]["steps"] if "make install-matrix" in s.get("run", "")]
    assert [s["env"]["TORCHES"] for s in matrix_steps] == ["${{ needs.tag.outputs.x86_64_torches }}",
                                                           "${{ needs.tag.outputs.aarch64_torches }}"]
    pins = P.load()
    r = run_cli("release-plan")
    assert r.returncode == 0, r.stderr
    out = dict(line.split("=", 1) for line in r.stdout.splitlines())
    assert out == release_plan(pins) and json.loads(out["pythons"]) == list(pins.matrix.pythons)
    x86, arm = pins.line_builds(pins.oeq_binary.name)
    assert out["x86_64_torches"].split(",") == [pins.matrix.torch_version, x86.tested_torch[0]]  # CUDA 13, CUDA 12
    assert out["aarch64_torches"] == arm.tested_torch[0]
    text = (REPO / ".github" / "workflows" / "release.yml").read_text()
    torches = {t for l in pins.oeq_lines for t in l.tested_torch} | {pins.matrix.torch_version}
    assert [t for t in sorted(torches) if t in text] == []
    assert [v for v in pins.matrix.pythons if f'"{v}"' in text] == ["3.12"]  # the tools' own Python only
    # Re-pinned: fewer CPythons and another torch, the plan says so.
    import dataclasses
    narrowed = dataclasses.replace(pins, matrix=dataclasses.replace(pins.matrix, pythons=("3.11", "3.12"),
                                                                    torch_version="9.1.0"))
    assert json.loads(release_plan(narrowed)["pythons"]) == ["3.11", "3.12"]
    assert release_plan(narrowed)["x86_64_torches"].startswith("9.1.0,")


def test_the_release_install_matrix_runs_exactly_the_rows_its_claim_names():
    """tests/claims.toml's torch-row names what release.yml's build job installs, and no more (an ELSEWHERE row is
    only as strong as the job it names): fastmace-oeq-ext's torch (CUDA 13) and the line's floor (CUDA 12) with pip on
    CPython 3.12, the first also on Debian testing's 3.14, both on the free-threaded 3.14t; the aarch64 build's floor
    with pip and uv on each emulated arm64 CPython. Every torch with both installers is `make install-matrix` by hand, a row of its own."""
    import re
    import shlex
    from support import claims
    from oeq_wheels import cli
    from oeq_wheels.checks import installmatrix
    from oeq_wheels.release.plan import release_plan
    pins = P.load()
    outputs = release_plan(pins)
    ran = set()
    for step in [s for s in load("release.yml")["jobs"]["build"]["steps"] if "make install-matrix" in s.get("run", "")]:
        (flags,) = [w.removeprefix("MATRIX_FLAGS=") for w in shlex.split(step["run"]) if w.startswith("MATRIX_FLAGS=")]
        output = re.fullmatch(r"\$\{\{ needs\.tag\.outputs\.(\w+) \}\}", step["env"]["TORCHES"]).group(1)
        a = cli.parser().parse_args(["install-matrix", "dist", *shlex.split(flags.replace("$TORCHES", outputs[output]))])
        ran |= {(c.torch, c.line.key, c.installer, c.python or a.python, c.mix) for c in installmatrix.plan(
            pins, a.torch, a.installer, a.arch, a.emulated_python, plain=not a.only_debian_pythons)}
    v = claims.pinned()  # the values the row's placeholders name
    x86, arm = (b.key for b in pins.line_builds(pins.oeq_binary.name))
    assert ran == {(v["matrix_torch"], x86, "pip", "3.12", False), (v["cuda12"], x86, "pip", "3.12", False),
                   (v["matrix_torch"], x86, "pip", "3.14", False),  # Debian testing's CPython, natively
                   (v["matrix_torch"], x86, "pip", "3.14t", False),  # the free-threaded CPython built here
                   (v["cuda12"], x86, "pip", "3.14t", False),
                   *{(v["floor"], arm, i, py, False) for i in ("pip", "uv") for py in ("3.11", "3.13", "3.14")}}
    (row,) = [r for c in claims.load() if c.id == "torch-row" for r in c.rows if r.elsewhere.startswith("release.yml")]
    assert row.name == (f"{v['matrix_torch']} and {v['cuda12']} with pip on CPython 3.12, {v['matrix_torch']} "
                        "with pip on Debian testing's 3.14, both on free-threaded 3.14t; aarch64: "
                        f"{v['floor']} with pip and uv on Debian's arm64 3.11, 3.13, 3.14 under qemu")


def test_every_wheel_the_release_attaches_and_serves_is_attested_with_least_privilege():
    jobs = load("release.yml")["jobs"]
    attest = jobs["attest"]
    assert attest["permissions"] == {"contents": "read", "id-token": "write", "attestations": "write"}
    assert attest["needs"] == "preflight"  # before any upload
    assert downloads(attest) == {"wheels": "dist", "oeq-wheels": "dist-extra"}  # both packages' wheels
    (step,) = [s for s in attest["steps"] if s.get("uses", "").startswith("actions/attest-build-provenance@")]
    assert step["with"]["subject-path"].split() == ["dist/*.whl", "dist-extra/*.whl"]
    from oeq_wheels import pins as P
    assert f"gh attestation verify WHEEL --repo {P.load().repository}" in (REPO / "README.md").read_text()


def test_both_workflows_let_bubblewrap_run_the_build_root_before_they_build():
    """Ubuntu 24.04 refuses user namespaces to unprivileged programs; the pinned build root needs them. The step
    changes the setting only where it exists (make rehearse-ci found it failing on a kernel without it)."""
    for wf, job in (("test.yml", "test"), ("release.yml", "build")):
        steps = load(wf)["jobs"][job]["steps"]
        runs = [s.get("run", "") for s in steps]
        first_build = next(i for i, r in enumerate(runs) if "make test" in r or "build.sh" in r)
        assert any("tools/ci/userns.sh" in r for r in runs[:first_build]), wf
        (py,) = [s for s in steps if s.get("uses", "").startswith("actions/setup-python@")]
        assert py["with"]["python-version-file"] == "${{ runner.temp }}/pythons", wf
    text = (REPO / "tools" / "ci" / "userns.sh").read_text()
    assert 'if [ "$(sysctl -n "$key" 2>/dev/null || echo absent)" = 1 ]' in text


def test_the_clean_install_job_has_the_binary_oeq_wheels_it_serves():
    """clean_install.sh serves OUTDIR-extra's openequivariance wheels as the one index; the job downloaded only dist/
    (make rehearse-ci: "no openequivariance wheel to serve")."""
    steps = load("release.yml")["jobs"]["clean-install"]["steps"]
    got = {s["with"]["name"]: s["with"]["path"] for s in steps if s.get("uses", "").startswith("actions/download-artifact@")}
    assert got == {"wheels": "dist", "oeq-wheels": "dist-extra"}
