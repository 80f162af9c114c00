"""Records of runs made elsewhere (records/runs/*.json): each one reads, the claims name only records that exist and
passed, docs/validation.md's sentences agree with them, and the proof table marks a record whose wheels are not
today's bytes STALE and a missing or failed one FAIL."""
import json
import re

import pytest

from support import claims
from support import REPO
from oeq_wheels.checks import run_records
from oeq_wheels.release import recorded

RECORDS = sorted((REPO / "records" / "runs").glob("*.json"))


def test_every_record_reads_and_names_its_commit_machine_and_wheels():
    assert RECORDS, "records/runs/ holds no record"
    for path in RECORDS:
        rec = run_records.load(path)
        assert rec.wheels and rec.machine["device"] and rec.commit


def test_the_claims_name_records_that_exist_passed_and_are_todays_bytes():
    named = {n for c in claims.load() for row in c.evidence() for n in run_records.named_in(row.elsewhere)}
    assert named, "no claim names a run record"
    today = recorded.load()
    for name in sorted(named):
        rec = run_records.load(run_records.DIR / name)
        assert rec.ok, f"{name} says its run failed"
        assert rec.staleness(today) == [], f"{name} is STALE: {rec.staleness(today)}"


def test_validations_gpu_sentence_is_the_records_sha256_and_todays_wheel():
    text = (REPO / "docs" / "validation.md").read_text()
    (said,) = re.findall(r"The GPU proofs are of the cp312-abi3 x86_64 wheel with sha256 ([0-9a-f]{64}),\s+as "
                         r"((?:`records/runs/[\w.+-]+\.json`(?:,\s+|\s+and\s+)?)+) hold it", text)
    digest, names = said
    names = run_records.named_in(names)
    assert len(names) >= 2, names
    (today,) = [d for w, d in recorded.load().wheels.items() if re.fullmatch(r"openequivariance-.*-cp312-abi3-.*x86_64\.whl", w)]
    assert digest == today
    for name in names:
        rec = run_records.load(run_records.DIR / name)
        assert digest in rec.wheels.values(), name


def test_validation_names_only_records_that_exist():
    text = (REPO / "docs" / "validation.md").read_text()
    for name in set(run_records.named_in(text)):
        assert (run_records.DIR / name).is_file(), name


def _current():
    """A record of today's bytes (an edit then makes it the only reason it is stale)."""
    today = recorded.load()
    return next(p for p in RECORDS if run_records.load(p).staleness(today) == [])


def _copy(tmp_path, edit) -> str:
    source = _current()
    raw = json.loads(source.read_text())
    edit(raw)
    (tmp_path / source.name).write_text(json.dumps(raw))
    return f"records/runs/{source.name}"


def test_a_record_with_other_bytes_is_stale_in_the_proof_table(tmp_path, monkeypatch):
    def other_bytes(raw):
        name = next(iter(raw["wheels"]))
        raw["wheels"][name] = "0" * 64
    named = _copy(tmp_path, other_bytes)
    monkeypatch.setattr(run_records, "DIR", tmp_path)
    d = run_records.describe(f"the GPU: {named}", directory=tmp_path)
    assert d.stale and not d.broken and "STALE:" in d.text and "ran as 000000000000" in d.text
    outcome = claims._judge_row(claims.Row("gpu", [], f"the GPU: {named}"), {})
    assert outcome.state == "STALE" and "STALE" in outcome.detail  # a state, not a word in a cut line
    claim = claims.Claim("c", "a claim", [], [], rows=[claims.Row("gpu", [], f"the GPU: {named}"), claims.Row("here", ["t"])])
    judged = claims.judge(claim, {"t": ("passed", "")})
    assert judged.state == "STALE" and judged.detail.startswith("row gpu: ")


@pytest.mark.parametrize("damage", ["failed", "missing", "not json"])
def test_a_failed_missing_or_damaged_record_fails_the_row(tmp_path, monkeypatch, damage):
    named = _copy(tmp_path, lambda raw: raw.update(ok=False))
    if damage == "missing":
        (tmp_path / _current().name).unlink()
    elif damage == "not json":
        (tmp_path / _current().name).write_bytes(b"\xff{")
    monkeypatch.setattr(run_records, "DIR", tmp_path)
    outcome = claims._judge_row(claims.Row("gpu", [], named), {})
    assert outcome.state == "FAIL", outcome
    assert ("FAILED" if damage == "failed" else "UNREADABLE") in outcome.detail


@pytest.mark.parametrize("edit, says", [
    (lambda raw: raw.update(schema="other"), "schema"),
    (lambda raw: raw.update(commit="main"), "\"commit\""),
    (lambda raw: raw["wheels"].update({"x.whl": "short"}), "\"wheels\""),
    (lambda raw: raw["machine"].pop("driver"), "\"machine\""),
    (lambda raw: raw.update(ok="yes"), "\"ok\""),
])
def test_a_damaged_record_is_one_line_naming_the_field(tmp_path, edit, says):
    _copy(tmp_path, edit)
    with pytest.raises(run_records.RecordError) as e:
        run_records.load(tmp_path / _current().name)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_write_reads_back_and_refuses_a_record_it_would_not_read(tmp_path):
    wheel = tmp_path / "x-1-py3-none-any.whl"
    wheel.write_bytes(b"bytes")
    machine = {"device": "none", "driver": "none", "python": "9.9.9", "torch": "9.9.9"}
    rec = run_records.write(tmp_path / "r.json", "make install-matrix", "a" * 40, machine, [wheel], True,
                            {"cases": []}, [])
    assert run_records.load(tmp_path / "r.json") == rec and rec.wheels[wheel.name].startswith("277089")
    with pytest.raises(run_records.RecordError, match="commit"):
        run_records.write(tmp_path / "bad.json", "t", "HEAD", machine, [wheel], True, {}, [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", wheel.name]  # nothing half-written
