"""Publishing's pure parts (oeq_wheels/release/publish.py): a password never printed, the tag and the repository
checked against the pins, the upload target and its index resolved as twine does, what an index already lists, the
set a release needs, and SHA256SUMS. Publishing real wheels is tests/integration/test_release.py's."""
import hashlib
import http.server
import os
from contextlib import contextmanager

import pytest

from oeq_wheels import pins as P
from oeq_wheels.errors import Refused, ReleaseError, UsageError
from oeq_wheels.checks import hosts
from oeq_wheels.release import publish
from support.cli import run_cli


def test_a_urls_password_is_never_printed():
    assert publish.redact("https://user:s3cret@example.invalid:8443/x/") == "https://user:***@example.invalid:8443/x/"
    assert publish.redact("http://user:s3cret@127.0.0.1/") == "http://user:***@127.0.0.1/"
    assert publish.redact("https://user@example.invalid/x/") == "https://user@example.invalid/x/"
    assert publish.redact("https://upload.pypi.org/legacy/") == "https://upload.pypi.org/legacy/"


def test_the_tag_is_v_and_the_pinned_version_and_the_repository_the_pinned_one():
    pins = P.load()
    assert publish.check_tag(f"v{pins.version}", pins) == f"v{pins.version}"
    assert publish.check_tag(f"refs/tags/v{pins.version}", pins) == f"v{pins.version}"
    for wrong in (pins.version, f"v{pins.version}.1", "", "vv" + pins.version):
        with pytest.raises(UsageError, match=f"does not match the pinned version: expected v{pins.version} "):
            publish.check_tag(wrong, pins)
    assert publish.check_repository(pins.repository.upper(), pins) == pins.repository.upper()  # GitHub: case-blind
    with pytest.raises(UsageError, match=f"runs in 'someone/fork', but oeq_wheels/pins.toml names "
                                         f"'{pins.repository}'"):
        publish.check_repository("someone/fork", pins)


def test_an_uploads_index_is_pypis_known_one_or_beside_the_upload_url():
    assert publish.index_for("https://upload.pypi.org/legacy/", None) == "https://pypi.org/simple/"
    assert publish.index_for("https://test.pypi.org/legacy/", None) == "https://test.pypi.org/simple/"
    assert publish.index_for("http://h:1/up", None) == "http://h:1/up/simple/"
    assert publish.index_for("http://h:1/up/", None) == "http://h:1/up/simple/"
    assert publish.index_for("https://upload.pypi.org/legacy/", "http://given/simple/") == "http://given/simple/"


@contextmanager
def index_page(body: str | None):
    """A loopback index that answers every page with body (404 where None)."""
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            data = (body or "").encode()
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    with hosts.serving_on_loopback(Page) as root:
        yield f"{root}/simple/"


def test_what_an_index_lists_is_read_with_each_files_sha256(tmp_path):
    ours = tmp_path / "o-1.0-py3-none-any.whl"
    ours.write_bytes(b"ours")
    digest = hashlib.sha256(b"ours").hexdigest()
    page = (f'<a href="../../files/o-1.0-py3-none-any.whl#sha256={digest}">o</a>\n'
            '<a href="https://x/o-0.9%2Blocal-py3-none-any.whl#md5=00&amp;sha256=">old</a>\n'
            '<a href="o-0.8-py3-none-any.whl">no hash</a>\n'
            f"<a href='o-0.7-py3-none-any.whl#sha256={digest}'>single quotes, as PEP 503 allows</a>")
    with index_page(page) as index:
        assert publish.files_on_index(index, "O") == {"o-1.0-py3-none-any.whl": digest,
                                                      "o-0.9+local-py3-none-any.whl": None,
                                                      "o-0.8-py3-none-any.whl": None,
                                                      "o-0.7-py3-none-any.whl": digest}
        assert publish.already_there(index, "o", [ours]) == [ours]
        ours.write_bytes(b"other bytes under our name")
        with pytest.raises(Refused, match=r"already has 1 of our file name\(s\) with other bytes: "
                                          r"o-1.0-py3-none-any.whl \(sha256 there " + digest[:16]):
            publish.already_there(index, "o", [ours])
    with index_page(None) as index:
        assert publish.files_on_index(index, "o") == {}  # the index does not know the project
    with pytest.raises(ReleaseError, match=r"cannot read http://user:\*\*\*@127.0.0.1:9/simple/o/ to check"):
        publish.files_on_index("http://user:secret@127.0.0.1:9/simple/", "o")  # nothing answers on port 9


def test_the_wheels_of_a_directory_by_project_and_a_file_that_is_no_wheel_named(tmp_path):
    for name in ("fastmace_oeq_ext-1.0-cp311-cp311-linux_x86_64.whl",
                 "Fastmace.Oeq_Ext-1.0-cp312-cp312-linux_x86_64.whl", "other-2.0-py3-none-any.whl", "garbage.whl",
                 "notes.txt"):
        (tmp_path / name).write_bytes(b"")
    by_name, problems = publish.wheels_in(tmp_path)
    assert {k: [w.name for w in v] for k, v in by_name.items()} == {
        "fastmace-oeq-ext": ["Fastmace.Oeq_Ext-1.0-cp312-cp312-linux_x86_64.whl",
                             "fastmace_oeq_ext-1.0-cp311-cp311-linux_x86_64.whl"],
        "other": ["other-2.0-py3-none-any.whl"]}
    assert len(problems) == 1 and problems[0].startswith("garbage.whl is not a valid wheel file name (")


def test_a_set_is_one_wheel_of_the_pinned_version_for_each_pinned_python(tmp_path):
    def names(*tags, version="1.0"):
        return [tmp_path / f"o-{version}-{t}-linux_x86_64.whl" for t in tags]
    assert publish._check_set(names("cp311-cp311", "cp314-cp314t"), "1.0", ("3.11", "3.14t"), "o") == []
    assert publish._check_set(names("cp311-cp311", "cp311-cp311", "cp313-cp313"), "1.0", ("3.11", "3.12"), "o") == [
        "incomplete o set: no wheel for cp312 (build them: make wheels)",
        "several o wheels for cp311: o-1.0-cp311-cp311-linux_x86_64.whl, o-1.0-cp311-cp311-linux_x86_64.whl",
        "o-1.0-cp313-cp313-linux_x86_64.whl is for cp313, which the pins do not release"]
    assert publish._check_set(names("cp311-cp311", version="0.9"), "1.0", ("3.11",), "o") == [
        "o-0.9-cp311-cp311-linux_x86_64.whl is version 0.9, pins say 1.0"]


def test_sha256sums_is_what_sha256sum_checks(tmp_path):
    wheels = []
    for name, data in (("a.whl", b"a"), ("b.whl", b"bb")):
        (tmp_path / name).write_bytes(data)
        wheels.append(tmp_path / name)
    path = publish.write_sha256sums(wheels, tmp_path)
    assert path == tmp_path / "SHA256SUMS" and path.read_text() == "".join(
        f"{hashlib.sha256(w.read_bytes()).hexdigest()}  {w.name}\n" for w in wheels)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["SHA256SUMS", "a.whl", "b.whl"]  # no part file left


def test_upload_target_is_resolved_as_twine_does(tmp_path, monkeypatch):
    for k in [k for k in os.environ if k.startswith("TWINE_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert publish.upload_target(None, None) == "https://upload.pypi.org/legacy/"
    assert publish.index_for(publish.upload_target("testpypi", None), None) == "https://test.pypi.org/simple/"
    (tmp_path / ".pypirc").write_text("[distutils]\nindex-servers = mine\n[mine]\nrepository = http://h:1/up/\n")
    assert publish.index_for(publish.upload_target("mine", None), None) == "http://h:1/up/simple/"
    monkeypatch.setenv("TWINE_REPOSITORY_URL", "http://env:2/")
    assert publish.upload_target(None, None) == "http://env:2/"
    with pytest.raises(UsageError, match="cannot resolve twine repository 'nope'"):  # the command line's: exit 2
        monkeypatch.delenv("TWINE_REPOSITORY_URL")
        publish.upload_target("nope", None)


@pytest.mark.parametrize("tag, ok", [("v" + P.load().version, True), ("refs/tags/v" + P.load().version, True),
                                     ("v0.7.0.post1", False), (P.load().version, False), ("", False)])
def test_release_tag_must_be_v_plus_the_pinned_version(tag, ok):
    r = run_cli("check-tag", tag)
    if ok:
        assert r.returncode == 0 and "matches the pinned version" in r.stdout, r.stderr
    else:
        assert r.returncode == 2 and f"expected v{P.load().version}" in r.stderr and "Traceback" not in r.stderr


def test_the_release_must_run_in_the_pinned_repository():
    pins = P.load()
    tag = "v" + pins.version
    r = run_cli("check-tag", tag, "--repository", pins.repository.upper())  # GitHub names are case-blind
    assert r.returncode == 0 and "is the pinned one" in r.stdout, r.stderr
    r = run_cli("check-tag", tag, "--repository", "someone/fork")
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "'someone/fork'" in r.stderr and pins.site_url in r.stderr and "[package] repository" in r.stderr
