"""`make rehearse-ci`'s parts that need no act run: every action has a stand-in, the tagged clone, the slice and
the jobs not run (the slice under act is tests/integration/test_rehearse_ci_act.py's)."""
import os
import subprocess
from pathlib import Path

import pytest

from support import REPO
from oeq_wheels.checks import rehearse_ci
from oeq_wheels.errors import CIRehearsalError


def test_every_action_the_workflows_use_has_a_stand_in_or_runs_as_it_is():
    workflows = [REPO / ".github" / "workflows" / w for w in ("release.yml", "test.yml")]
    args = rehearse_ci.local_repositories(workflows)
    assert any(a.startswith("actions/setup-python@") and a.endswith("tools/ci/act/setup-python") for a in args)
    assert not any(a.startswith("actions/checkout@") for a in args)  # act's own: the clone is the workspace
    for _repo, (folder, _what) in rehearse_ci.STANDINS.items():
        assert folder is None or (rehearse_ci.STANDIN_DIR / folder).exists(), folder


def test_every_stand_in_is_an_action_act_can_read():
    """act reads each stand-in's action.yml as YAML (a `run: echo "a: b"` is not, and stopped test.yml's job)."""
    import yaml
    folders = [f for f in (REPO / "tools/ci/act").iterdir() if (f / "action.yml").is_file()]
    assert len(folders) >= 8
    for f in folders:
        action = yaml.safe_load((f / "action.yml").read_text())
        assert action["runs"]["using"] in ("composite", "node20", "node24"), f
        assert all(isinstance(step.get("run", ""), str) for step in action["runs"].get("steps", [])), f


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.email=a@b", "-c", "user.name=a", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def _committed_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir()
    _git(path, "init", "-q")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    _git(path, "add", "-A")
    _git(path, "commit", "-qm", "x")
    return path


def _files(root: Path) -> dict[str, tuple[str, bool]]:
    """Every file under root but git's own: (its text, or where its link points; whether it is executable)."""
    return {p.relative_to(root).as_posix(): (os.readlink(p) if p.is_symlink() else p.read_text(), os.access(p, os.X_OK))
            for p in root.rglob("*") if ".git" not in p.relative_to(root).parts and (p.is_file() or p.is_symlink())}


def test_the_clone_is_tagged_even_where_the_checkout_has_the_tag_already(tmp_path):
    """On the release, test.yml (and so the slice in `make test`) runs from a checkout of the tag itself."""
    from oeq_wheels import pins as P
    pins = P.load()
    repo = _committed_repo(tmp_path / "repo", {"f": "x"})
    _git(repo, "tag", f"v{pins.version}")
    clone, tag, said = rehearse_ci.tagged_clone(repo, tmp_path / "clone", pins)
    assert tag == f"v{pins.version}"
    head = subprocess.run(["git", "rev-parse", "HEAD", f"{tag}^{{}}"], cwd=clone, capture_output=True, text=True)
    assert len(set(head.stdout.split())) == 1
    origin = subprocess.run(["git", "remote", "get-url", "origin"], cwd=clone, capture_output=True, text=True)
    assert origin.stdout.strip() == f"https://github.com/{pins.repository}.git"
    tree = _git(repo, "rev-parse", "HEAD^{tree}")
    assert said == rehearse_ci.describe_tree(_git(repo, "rev-parse", "HEAD"), tree, 0)  # a clean tree: HEAD itself
    assert _git(clone, "rev-parse", "HEAD") == _git(repo, "rev-parse", "HEAD")


def test_the_rehearsal_runs_the_working_tree_not_head(tmp_path):
    """The tree under test, uncommitted changes and all: what `git add -A` would commit (a modified, a staged, a
    deleted, a new and a re-moded file, a link), nothing that .gitignore or info/exclude ignores; the tagged commit
    holds it (the workflows read it through git) and the clone is clean at it. The repository is only read."""
    from oeq_wheels import pins as P
    pins = P.load()
    repo = _committed_repo(tmp_path / "repo", {"kept": "1", "edited": "old", "staged": "old", "gone": "x",
                                               "tool.sh": "echo", "sub/deep": "d", ".gitignore": "/dist/\n*.log\n"})
    head = _git(repo, "rev-parse", "HEAD")
    (repo / "edited").write_text("new")
    (repo / "staged").write_text("staged")
    _git(repo, "add", "staged")
    (repo / "gone").unlink()
    (repo / "tool.sh").chmod(0o755)
    (repo / "sub" / "new").write_text("untracked")
    (repo / "link").symlink_to("kept")
    (repo / "dist").mkdir()
    (repo / "dist" / "a.whl").write_text("build output")  # ignored by .gitignore
    (repo / "run.log").write_text("log")  # ignored by .gitignore
    (repo / "mine").write_text("local")  # ignored by the repository's own info/exclude
    exclude = repo / ".git" / "info" / "exclude"
    exclude.parent.mkdir(exist_ok=True)
    exclude.write_text("/mine\n")
    status, objects = _git(repo, "status", "--porcelain"), _git(repo, "count-objects", "-v")

    clone, tag, said = rehearse_ci.tagged_clone(repo, tmp_path / "clone", pins)

    expected = {"kept": ("1", False), "edited": ("new", False), "staged": ("staged", False), "tool.sh": ("echo", True),
                "sub/deep": ("d", False), "sub/new": ("untracked", False), "link": ("kept", False),
                ".gitignore": ("/dist/\n*.log\n", False)}
    assert _files(clone) == expected
    assert _git(clone, "status", "--porcelain", "--untracked-files=all") == ""  # act's checkout: clean, at the tag
    assert _git(clone, "rev-parse", "HEAD^") == head == _git(clone, "rev-parse", f"{tag}^{{}}^")
    assert _git(clone, "show", f"{tag}:edited") == "new"  # what `git show TAG:records/release.json` reads
    tree = _git(clone, "rev-parse", "HEAD^{tree}")
    assert said == rehearse_ci.describe_tree(head, tree, 6)  # edited, staged, gone, tool.sh, sub/new, link
    assert (_git(repo, "status", "--porcelain"), _git(repo, "count-objects", "-v")) == (status, objects)


def test_a_worktree_is_rehearsed_as_its_own_working_tree(tmp_path):
    """A linked worktree (git worktree add) is cloned at its own HEAD, with its own changes, not the main checkout's."""
    from oeq_wheels import pins as P
    main = _committed_repo(tmp_path / "main", {"f": "main"})
    _git(main, "worktree", "add", "-q", "--detach", str(tmp_path / "wt"))
    wt = tmp_path / "wt"
    (wt / "f").write_text("worktree")
    _git(wt, "commit", "-qam", "in the worktree")
    (wt / "g").write_text("uncommitted")
    clone, _tag, said = rehearse_ci.tagged_clone(wt, tmp_path / "clone", P.load())
    assert _files(clone) == {"f": ("worktree", False), "g": ("uncommitted", False)}
    assert _git(clone, "rev-parse", "HEAD^") == _git(wt, "rev-parse", "HEAD") != _git(main, "rev-parse", "HEAD")
    assert " and 1 path(s) not committed there " in said


def test_the_act_slice_needs_act_and_root_or_password_free_sudo(tmp_path):
    """What tests/integration/test_rehearse_ci_act.py asks before it runs act: act in the tools' venv, and root (which
    makes the runner user) or password-free sudo, as runner_user needs; sudo is not asked of root."""
    act = tmp_path / "act"
    never = lambda: pytest.fail("sudo was asked although the rehearsal runs as root")  # noqa: E731
    assert "act is not in the pinned tools' venv" in rehearse_ci.missing_here(0, never, act)
    act.write_text("")
    assert rehearse_ci.missing_here(0, never, act) is None
    assert rehearse_ci.missing_here(1000, lambda: True, act) is None
    assert rehearse_ci.missing_here(1000, lambda: False, act) == \
        "needs root or password-free sudo, as GitHub's runner has (`sudo -n true` failed for this user)"


def test_the_act_slice_missing_its_capability_fails_where_act_is_required_and_is_a_named_skip_elsewhere(monkeypatch):
    """The act slice asks unavailable("act", why), never pytest.mark.skipif: a skipif is decided before any test runs
    and bypasses OEQ_WHEELS_TEST_REQUIRE, so the act test could pass a required run silently."""
    import ast
    from support import capabilities
    assert "act" in capabilities.CAPABILITIES
    why = "needs root or password-free sudo, as GitHub's runner has (`sudo -n true` failed for this user)"
    monkeypatch.setattr(capabilities, "REQUIRE", {"engines", "emulation", "act"})
    required = r"^act required \(OEQ_WHEELS_TEST_REQUIRE\) but not available: needs root"
    with pytest.raises(pytest.fail.Exception, match=required):
        capabilities.unavailable("act", why)
    monkeypatch.setattr(capabilities, "REQUIRE", {"engines", "emulation"})
    with pytest.raises(pytest.skip.Exception, match="needs root or password-free sudo"):
        capabilities.unavailable("act", why)
    # The integration test itself: no skipif, and its first statements are that decision.
    source = (REPO / "tests" / "integration" / "test_rehearse_ci_act.py").read_text()
    (test,) = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    assert not test.decorator_list
    first = ast.unparse(test.body[0]) + "\n" + ast.unparse(test.body[1])
    assert first == "why = rehearse_ci.cannot_run_here()\nif why:\n    unavailable('act', why)"


def test_the_act_slice_has_a_claim_in_the_words_of_docs_releasing():
    """The proof table's act-slice row says what the act test proves, in the words docs/releasing.md and
    docs/testing.md's list use (their sentences wrap, so the words are compared with the line breaks as spaces)."""
    from support import claims
    (claim,) = [c for c in claims.load() if c.id == "act-slice"]
    assert claim.tests == ["tests/integration/test_rehearse_ci_act.py::test_release_workflows_tag_job_and_one_cpythons_"
                           "build_run_under_act_as_githubs_runner_would"]
    assert [doc for doc, _ in claim.at] == ["docs/releasing.md", "docs/testing.md"]
    for doc, _ in claim.at:
        assert claim.claim in " ".join((REPO / doc).read_text().split()), doc


def test_an_action_without_a_stand_in_is_one_line(tmp_path):
    wf = tmp_path / "x.yml"
    wf.write_text("jobs:\n  a:\n    steps:\n      - uses: someone/new-action@" + "0" * 40 + "  # v1\n")
    with pytest.raises(CIRehearsalError, match=r"no stand-in for someone/new-action \(x.yml\)"):
        rehearse_ci.local_repositories([wf])


def test_the_slice_keeps_the_tag_job_and_the_build_steps_for_one_cpython(tmp_path):
    import yaml
    out = yaml.safe_load(rehearse_ci.narrow(REPO / ".github" / "workflows" / "release.yml", "3.11",
                                            tmp_path / "slice.yml").read_text())
    assert set(out["jobs"]) == {"tag", "build"} and out["jobs"]["build"]["needs"] == ["tag"]
    runs = [s.get("run", "") for s in out["jobs"]["build"]["steps"]]
    assert any("build.sh dist --python 3.11 --runner host" in r for r in runs) and "make verify" in runs
    kept = [s["with"]["name"] for s in out["jobs"]["build"]["steps"] if s.get("uses", "").startswith("actions/upload-")]
    assert kept == ["wheels", "oeq-wheels"]  # the job's own steps keep what the slice then holds to the record
    assert "push" in out.get("on", out.get(True))  # YAML 1.1 reads the key `on` as true


def test_the_rehearsed_workflow_lacks_only_the_jobs_named_not_run(tmp_path):
    import yaml
    src = yaml.safe_load((REPO / ".github" / "workflows" / "release.yml").read_text())
    dropped = set(rehearse_ci.NOT_RUN) | {"tests"}
    out = yaml.safe_load(rehearse_ci.without(REPO / ".github" / "workflows" / "release.yml", dropped,
                                             tmp_path / "r.yml").read_text())
    assert set(out["jobs"]) == set(src["jobs"]) - dropped
    assert out["jobs"]["build"]["needs"] == ["tag"]
    assert out["jobs"]["build"]["steps"] == src["jobs"]["build"]["steps"]


def test_the_slice_is_every_wheel_the_record_names_for_its_cpython_with_the_recorded_bytes(tmp_path):
    """The slice's line ("the slice's N wheel(s) are the recorded bytes") is said only when the build job left every
    wheel the record names for that CPython, each with its bytes: a build that left fewer, or other bytes, is one
    problem naming the file."""
    from oeq_wheels.files import sha256_file
    from oeq_wheels.release import recorded as R
    built = []
    for name, text in (("a-1.0-cp311-cp311-linux_x86_64.whl", "a"), ("b-1.0-cp311-cp311-linux_x86_64.whl", "b")):
        (tmp_path / name).write_text(text)
        built.append(tmp_path / name)
    record = R.Recorded("1.0", {**{f.name: sha256_file(f) for f in built},
                                "a-1.0-cp312-abi3-linux_x86_64.whl": "0" * 64}, "release.json")
    assert rehearse_ci.slice_problems(record, built, "3.11") == []
    assert rehearse_ci.slice_problems(record, built[:1], "3.11") == [
        "the build job left no b-1.0-cp311-cp311-linux_x86_64.whl (release.json names it for CPython 3.11)"]
    built[1].write_text("other bytes")
    (problem,) = rehearse_ci.slice_problems(record, built, "3.11")
    assert problem.startswith("b-1.0-cp311-cp311-linux_x86_64.whl has sha256 ")
    assert rehearse_ci.slice_problems(record, [], "3.14") == ["the build job left no wheel"]
    assert rehearse_ci.slice_line(2, "3.11") == ("rehearse-ci: the slice's 2 wheel(s) are the recorded bytes, every one "
                                                 "records/release.json names for CPython 3.11")
    # the suite's slice (3.11): both packages' wheels of every line the record names
    names = [n for n in R.load().wheels if rehearse_ci.slice_tag("3.11") in n]
    assert {n.split("-")[0] for n in names} == {"fastmace_oeq_ext", "openequivariance"}


def test_the_publish_stand_in_skips_what_the_index_has_as_skip_existing_does(tmp_path):
    """release.yml publishes with skip-existing (a re-run completes a partial upload); twine takes --skip-existing for
    PyPI only, so the stand-in leaves a file the loopback index has alone itself (make rehearse-ci found twine
    refusing the flag)."""
    import sys
    import yaml
    from support.fake_registry import wheel_bytes
    from oeq_wheels.checks import hosts
    action = yaml.safe_load((REPO / "tools/ci/act/pypi-publish/action.yml").read_text())
    (step,) = action["runs"]["steps"]
    dist = tmp_path / "dist"
    dist.mkdir()
    for name in ("demo_a", "demo_b"):
        info = f"{name}-1.0.dist-info"
        (dist / f"{name}-1.0-py3-none-any.whl").write_bytes(wheel_bytes({
            f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
            f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
            f"{info}/RECORD": b""}))
    packages = tmp_path / "packages"
    packages.mkdir()
    with hosts.pypiserver(packages, tmp_path / "server.log", "-a", ".", "-P", ".", "--overwrite") as url:
        env = dict(os.environ, DIR=str(dist), SKIP="true", OEQ_REHEARSAL_PYPI=url,
                   OEQ_REHEARSAL_TWINE=str(Path(sys.executable).parent / "twine"))
        first = subprocess.run(["bash", "-c", step["run"]], env=env, capture_output=True, text=True)
        assert first.returncode == 0, first.stdout + first.stderr
        assert "uploaded 2 file(s)" in first.stdout and len(list(packages.iterdir())) == 2
        again = subprocess.run(["bash", "-c", step["run"]], env=env, capture_output=True, text=True)
        assert again.returncode == 0, again.stdout + again.stderr
        assert again.stdout.count("on the index already (skip-existing)") == 2 and "uploaded 0 file(s)" in again.stdout


def test_the_gh_stand_in_runs_with_the_stand_ins_python_not_the_runners(tmp_path):
    """release.yml's github-release job has no setup-python: python3 on PATH is the runner's own, without the
    pipeline's requirements (make rehearse-ci found the stand-in failing to import packaging there)."""
    import sys
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\necho 'not the stand-ins python' >&2\nexit 3\n")
    (fake / "python3").chmod(0o755)
    wheel = tmp_path / "openequivariance-1.0+local.x-py3-none-any.whl"
    wheel.write_bytes(b"w")
    env = {"PATH": f"{fake}:/usr/bin:/bin", "OEQ_REHEARSAL_PYTHON": sys.executable, "OEQ_REHEARSAL_REPO": str(REPO),
           "OEQ_REHEARSAL_GITHUB": str(tmp_path / "github"), "GITHUB_REPOSITORY": "o/r",
           # the runner's setup-python leaves a shared-library CPython that needs it (make rehearse-ci found this)
           **{k: os.environ[k] for k in ("LD_LIBRARY_PATH",) if k in os.environ}}
    gh = str(REPO / "tools/ci/act/bin/gh")
    r = subprocess.run([gh, "release", "create", "v1", str(wheel), "--repo", "o/r", "--title", "v1"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assets = [p.name for p in (tmp_path / "github/releases/v1/assets").iterdir()]
    assert assets == ["openequivariance-1.0.local.x-py3-none-any.whl"]  # renamed as GitHub renames ('+' -> '.')
    assert subprocess.run([gh, "release", "view", "v1", "--repo", "o/r"], env=env).returncode == 0


def test_the_tool_cache_has_one_place_for_every_run():
    """The venvs --keep-caches keeps name their interpreter by its path: a tool cache in the run's workspace (gone
    with the run) broke every kept venv in the next run (a53f4c3: 22 failures). One place in the runner's caches,
    emptied with them unless they are kept."""
    import inspect
    home = Path("/home/runner")
    assert rehearse_ci.tool_cache_dir(home) == rehearse_ci.tool_cache_dir(home)
    assert rehearse_ci.tool_cache_dir(home).is_relative_to(home / ".cache")
    src = inspect.getsource(rehearse_ci.run)
    assert "tool_cache(tool_cache_dir(home)" in src and '"toolcache"' not in src
    # emptied before the tool cache is made there, not after
    assert src.index('for c in (".cache", ".local/share/uv")') < src.index("tool_cache(tool_cache_dir(home)")


def test_the_last_mile_slice_keeps_every_publishing_job_and_feeds_the_comparison_the_seeded_build():
    """`rehearse-ci --hostile` (checks/last_mile.py): release.yml's own publishing jobs as they are; the build job cut
    to its native comparison (no `if`: the native artifact is seeded) and its artifacts; one clean scenario, one
    manual run. The scenarios themselves run under act (`make rehearse-ci REHEARSE_CI_FLAGS=--hostile`)."""
    from oeq_wheels.checks import last_mile
    wf = last_mile.workflow(rehearse_ci._load(REPO / ".github" / "workflows" / "release.yml"))
    original = rehearse_ci._load(REPO / ".github" / "workflows" / "release.yml")["jobs"]
    assert list(wf["jobs"]) == ["tag", "build", "preflight", "attest", "publish-pypi", "github-release", "pages"]
    for name in ("attest", "publish-pypi", "github-release", "pages"):
        assert wf["jobs"][name] == original[name], name
    steps = wf["jobs"]["build"]["steps"]
    runs = [s.get("run", "") for s in steps]
    assert any("$OEQ_REHEARSAL_SEED/dist" in r for r in runs) and not any("build.sh" in r for r in runs)
    (compare,) = [s for s in steps if "compare-builds" in s.get("run", "")]
    assert "--bytes" in compare["run"] and "if" not in compare
    uploads = [s["with"]["name"] for s in steps if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert uploads == ["wheels", "oeq-wheels", "release-files"]
    assert [s.event for s in last_mile.SCENARIOS.values()].count("workflow_dispatch") == 1
    assert [s.name for s in last_mile.SCENARIOS.values() if not s.refusal] == ["clean"]


def test_the_gh_stand_in_refuses_an_attestation_of_another_workflow_or_ref(tmp_path):
    """The rehearsal's `gh attestation verify` models the pinned signer: the subject's digest attested by this
    repository's release.yml at the release's tag passes; by another workflow, or on another ref, it does not."""
    import hashlib
    import os
    import subprocess
    import sys
    from support import REPO
    wheel = tmp_path / "x-1.0-py3-none-any.whl"
    wheel.write_bytes(b"ours")
    digest = hashlib.sha256(b"ours").hexdigest()
    repo = "owner/oeq-wheels"
    (tmp_path / "attested.txt").write_text(f"{digest} {repo}/.github/workflows/release.yml refs/tags/v1 {wheel}\n")
    env = {**os.environ, "OEQ_REHEARSAL_GITHUB": str(tmp_path), "GITHUB_REPOSITORY": repo, "OEQ_REHEARSAL_REPO": str(REPO)}

    def verify(workflow: str, ref: str) -> int:
        return subprocess.run([sys.executable, str(REPO / "tools/ci/act/gh_standin.py"), "attestation", "verify",
                               str(wheel), "--repo", repo, "--signer-workflow", workflow, "--source-ref", ref],
                              env=env, capture_output=True, text=True).returncode
    assert verify(f"{repo}/.github/workflows/release.yml", "refs/tags/v1") == 0
    assert verify(f"{repo}/.github/workflows/other.yml", "refs/tags/v1") == 1  # a foreign signer
    assert verify(f"{repo}/.github/workflows/release.yml", "refs/heads/main") == 1  # another ref


def _stand_in_step(name: str) -> str:
    import yaml
    (step,) = yaml.safe_load((REPO / "tools/ci/act" / name / "action.yml").read_text())["runs"]["steps"]
    return step["run"]


def test_an_artifact_keeps_its_folders_from_the_search_paths_common_folder_and_downloads_back_in_place(tmp_path):
    """upload-artifact roots an artifact at the least common ancestor of its search paths: release.yml's oeq-wheels
    artifact (dist-extra/*.whl and dist-extra/variants/*.whl) keeps variants/, so that the preflight's
    dist-extra/variants/*.whl finds them again (a flat copy left that glob empty and stopped the clean run)."""
    work, artifacts = tmp_path / "work", tmp_path / "artifacts"
    for rel in ("dist-extra/a.whl", "dist-extra/variants/b.whl", "dist-extra/SHA256SUMS", "dist/c.whl"):
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(rel)
    uploads = {"oeq-wheels": "dist-extra/*.whl\ndist-extra/variants/*.whl\n", "release-files": "dist-extra/SHA256SUMS\n",
               "wheels": "dist/*.whl"}
    for name, paths in uploads.items():
        env = dict(os.environ, NAME=name, PATHS=paths, IF_NONE="error", OEQ_REHEARSAL_ARTIFACTS=str(artifacts))
        r = subprocess.run(["bash", "-c", _stand_in_step("upload-artifact")], cwd=work, env=env, capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stderr
    laid = sorted(p.relative_to(artifacts).as_posix() for p in artifacts.rglob("*") if p.is_file())
    assert laid == ["oeq-wheels/a.whl", "oeq-wheels/variants/b.whl", "release-files/SHA256SUMS", "wheels/c.whl"]
    back = tmp_path / "back"
    back.mkdir()
    env = dict(os.environ, NAME="oeq-wheels", PATTERN="", DEST="dist-extra", MERGE="false",
               OEQ_REHEARSAL_ARTIFACTS=str(artifacts))
    r = subprocess.run(["bash", "-c", _stand_in_step("download-artifact")], cwd=back, env=env, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert (back / "dist-extra" / "variants" / "b.whl").read_text() == "dist-extra/variants/b.whl"


def test_a_hostile_run_writes_a_record_of_each_scenarios_verdict_and_the_seeded_wheels(tmp_path, monkeypatch):
    """`--hostile --record FILE`: the record reads as every record does (checks/run_records.py), with each scenario's
    verdict and the sha256 of each wheel the scenarios were seeded with. act itself is the integration test's."""
    from oeq_wheels.checks import last_mile, run_records
    from support.fake_registry import wheel_bytes
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "demo-1.0-py3-none-any.whl").write_bytes(wheel_bytes({"demo-1.0.dist-info/RECORD": b""}))

    def ran(fresh, keep, scenario, verdicts, seed):
        verdicts.append({"scenario": scenario.name, "ok": True, "result": "as expected"})
        return 0
    monkeypatch.setattr(rehearse_ci, "run", ran)
    monkeypatch.setattr(run_records, "checkout_commit", lambda: "0" * 40)
    monkeypatch.setattr(rehearse_ci, "act_binary", lambda: "true")
    record = tmp_path / "rec.json"
    assert rehearse_ci.run_hostile(only=["clean", "foreign-signer"], record=record, seed=dist) == 0
    rec = run_records.load(record)
    assert rec.ok and rec.commit == "0" * 40 and list(rec.wheels) == ["demo-1.0-py3-none-any.whl"]
    assert [c["scenario"] for c in rec.results["cases"]] == ["clean", "foreign-signer"]
    assert set(last_mile.SCENARIOS) >= {"artifact-tampered", "native-short", "ambiguous-zip", "older-asset-altered"}
