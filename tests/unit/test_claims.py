"""tests/claims.toml against the documents and the suite: every proof sentence has an entry, every entry's text
is in its document and every test it names exists; and the table judges a claim as the run went."""
import claims


def test_every_proof_sentence_has_an_entry_and_every_entry_holds():
    entries = claims.load()
    assert claims.unclaimed(entries) == []
    assert claims.missing_anchors(entries) == []
    assert claims.missing_tests(entries) == []


def test_a_removed_test_or_an_unclaimed_sentence_is_caught(tmp_path):
    entries = claims.load()
    gone = claims.Claim("x", "x", [], ["tests/test_claims.py::test_that_does_not_exist"])
    assert claims.missing_tests([*entries, gone]) == ["x: tests/test_claims.py::test_that_does_not_exist"]
    assert claims.missing_tests([claims.Claim("y", "y", [], [])]) == ["y: names no test and nowhere else"]
    for doc in claims.DOCUMENTS:
        (tmp_path / doc).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / doc).write_text((claims.REPO / doc).read_text())
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text() + "\nThe moon landing is tested daily.\nThis is not tested.\n")
    assert claims.unclaimed(entries, tmp_path) == ["README.md: The moon landing is tested daily."]
    readme.write_text(readme.read_text().replace("each row tested with FastMACE's", "each row with FastMACE's"))
    assert claims.missing_anchors(entries, tmp_path) == \
        ["fastmace-rows: README.md has no \"each row tested with FastMACE's\""]


def test_the_table_judges_each_claim_by_its_tests():
    c = claims.Claim("c", "c", [], ["tests/t.py::test_a", "tests/t.py::test_b"])
    judge = lambda results: claims.judge(c, results).state
    assert judge({"tests/t.py::test_a": ("passed", ""), "tests/t.py::test_b[x]": ("passed", "")}) == "PASS"
    assert judge({"tests/t.py::test_a": ("passed", ""), "tests/t.py::test_b[x]": ("failed", "")}) == "FAIL"
    skipped = claims.judge(c, {"tests/t.py::test_a": ("skipped", "no dockerd: apt-get failed"),
                               "tests/t.py::test_b": ("passed", "")})  # one skip: the claim is not proven
    assert (skipped.state, skipped.detail) == ("SKIPPED", "1 of 2 skipped; tests/t.py::test_a: no dockerd: apt-get failed")
    assert judge({"tests/t.py::test_ab": ("passed", "")}) == "NOT RUN"  # a prefix of a name is not the test
    assert claims.judge(claims.Claim("g", "g", [], [], "the H200"), {}).state == "ELSEWHERE"
