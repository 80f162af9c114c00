"""The recorded set (records/release.json, oeq_wheels/release/recorded.py): the release's allow-list at every door.
docs/validation.md's first table shows the same set; a file it does not name, or names with other bytes, is refused
in one line naming it; a set is read from a release's own tag."""
from __future__ import annotations

import hashlib
import json
import re
import subprocess

import pytest

from oeq_wheels import errors, pins as P
from oeq_wheels.release import recorded

REPO = recorded.REPO


def test_the_recorded_set_is_the_pins_release_and_validation_md_shows_exactly_it():
    r = recorded.load()
    pins = P.load()
    assert r.version == pins.version
    # one wheel per pinned build: each fastmace-oeq-ext variant's CPythons, each OEq line's and its PEP 825 variant
    assert len(r.wheels) == len(pins.ext_variants) * len(pins.matrix.pythons) + \
        sum(len(l.pythons) for l in pins.oeq_lines)  # a wheel per CPython of each architecture's build
    first = (REPO / "docs" / "validation.md").read_text().split("\n## ")[1]
    table = dict(re.findall(r"^\| `([^`]+\.whl)` \| `([0-9a-f]{64})` \|", first, re.M))
    assert table == r.wheels


def test_a_file_not_recorded_or_with_other_bytes_is_refused_naming_it(tmp_path):
    r = recorded.load()
    name, digest = next(iter(r.wheels.items()))
    w = tmp_path / name
    w.write_bytes(b"other bytes")
    with pytest.raises(errors.Refused, match=rf"refusing to upload: {re.escape(name)} has sha256 "
                                             rf"{hashlib.sha256(b'other bytes').hexdigest()[:16]}…"):
        r.refuse_unrecorded([w], "upload")
    stranger = tmp_path / "x-1.0-py3-none-any.whl"
    stranger.write_bytes(b"")
    with pytest.raises(errors.Refused, match="x-1.0-py3-none-any.whl is not in the recorded set"):
        r.refuse_unrecorded([stranger], "upload")
    same = recorded.Recorded(r.version, {name: hashlib.sha256(b"other bytes").hexdigest()}, "test")
    same.refuse_unrecorded([w], "upload")
    same.refuse_incomplete([w], "upload")
    more = recorded.Recorded(r.version, {**same.wheels, "y-1.0-py3-none-any.whl": "0" * 64}, "test")
    with pytest.raises(errors.Refused, match="also names y-1.0-py3-none-any.whl.*download every artifact"):
        more.refuse_incomplete([w], "upload")


@pytest.mark.parametrize("data, why", [
    (b"\xff\xfe not utf-8", "is not JSON"),
    (b"[" * 200_000, "is not JSON"),
    (b'{"version": "1", "wheels": {"a.whl": "short"}}', "is no recorded set"),
    (b'{"version": "1", "wheels": {}}', "is no recorded set"),
    (b"[]", "is no recorded set"),
    (b" " * (recorded.MAX_BYTES + 1), "bytes, no recorded set"),
])
def test_a_malformed_set_is_one_line(data, why):
    with pytest.raises(errors.UsageError, match=why):
        recorded.parse(data, "test")


def test_a_release_is_held_to_the_set_of_its_own_tag(tmp_path):
    repo = tmp_path / "r"
    (repo / "records").mkdir(parents=True)
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)
    git("init", "-q")
    (repo / "records" / "release.json").write_text(json.dumps({"version": "1", "wheels": {"a-1-py3-none-any.whl": "a" * 64}}))
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    git("tag", "v1")
    (repo / "records" / "release.json").write_text(json.dumps({"version": "2", "wheels": {"a-1-py3-none-any.whl": "b" * 64}}))
    assert recorded.at_tag("v1", repo).wheels == {"a-1-py3-none-any.whl": "a" * 64}  # the tag's, not the tree's
    with pytest.raises(errors.Refused, match="release v2: its tag has no records/release.json"):
        recorded.at_tag("v2", repo)
    with pytest.raises(errors.UsageError, match="is not a release tag"):
        recorded.at_tag("main; rm -rf /", repo)


def test_an_input_that_is_no_regular_file_or_too_large_is_refused_unread(tmp_path):
    """A recorded name that is a link to /dev/zero once made a door read forever; a 200 MiB SHA256SUMS of valid lines
    was read whole. Each is refused in one line before a byte is read."""
    import os
    r = recorded.load()
    name, digest = next(iter(r.wheels.items()))
    os.symlink("/dev/zero", tmp_path / name)
    with pytest.raises(errors.Refused, match=rf"{re.escape(name)} is not a regular file"):
        r.refuse_unrecorded([tmp_path / name], "upload")
    sums = tmp_path / "SHA256SUMS"
    with open(sums, "wb") as f:
        f.truncate(200 << 20)  # sparse: the test writes nothing
    with pytest.raises(errors.Refused, match=r"SHA256SUMS is 209715200 bytes, larger than any file of ours"):
        recorded.check_sums(sums, r)
    sums.write_text(f"{digest}  {name}\n" * 2)
    with pytest.raises(errors.Refused, match=rf"line 2 disagrees .*: {re.escape(name)} is named twice"):
        recorded.check_sums(sums, r)


def test_the_release_notes_are_the_recorded_set_and_nothing_of_the_artifact():
    """release.yml's github-release job writes its notes with `recorded notes`: every recorded file and sha256, from
    the tagged commit alone (the artifact's REPORT.md was attached unchecked before)."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-s", "-m", "oeq_wheels.release.recorded", "notes"], capture_output=True,
                       text=True, cwd=REPO, env={"PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    rows = dict(re.findall(r"^\| `([^`]+\.whl)` \| `([0-9a-f]{64})` \|$", r.stdout, re.M))
    assert rows == recorded.load().wheels
    workflow = (REPO / ".github" / "workflows" / "release.yml").read_text()
    assert "recorded notes >notes.md" in workflow and "--notes-file notes.md" in workflow
    assert "REPORT.md" not in workflow.split("github-release:")[1].split("\n  pages:")[0]
