"""tests/claims.toml against the documents and the suite: every proof sentence has an entry, every entry's text
is in its document and every test it names exists; and the table judges a claim as the run went."""
from support import claims


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
    part = claims.judge(c, {"tests/t.py::test_a": ("passed", "")})  # a narrowed run: test_b was not selected
    assert (part.state, part.detail) == ("PARTIAL", "1 test(s); 1 of its 2 not run: tests/t.py::test_b")
    assert claims.judge(claims.Claim("g", "g", [], [], "the H200"), {}).state == "ELSEWHERE"


def test_a_claim_with_rows_says_which_rows_ran_here_and_which_are_proven_elsewhere():
    rows = [claims.Row("9.1.0", ["tests/t.py::test_load[9.1.0]"]), claims.Row("9.2.3", ["tests/t.py::test_load[9.2.3]"]),
            claims.Row("pip and uv", [], "make install-matrix")]
    c = claims.Claim("torch", "t", [], [], rows=rows, checks=["tests/t.py::test_yaml"])
    both = {"tests/t.py::test_load[9.1.0]": ("passed", ""), "tests/t.py::test_load[9.2.3]": ("passed", ""),
            "tests/t.py::test_yaml": ("passed", "")}
    assert (claims.judge(c, both).state, claims.judge(c, both).detail) == \
        ("PASS", "2/3 rows here; 1 elsewhere: pip and uv")
    narrowed = {k: v for k, v in both.items() if "9.2.3" not in k}  # OEQ_RULES_TORCHES=9.1.0, say
    assert (claims.judge(c, narrowed).state, claims.judge(c, narrowed).detail) == \
        ("PARTIAL", "1/3 rows here; 1 not run: 9.2.3; 1 elsewhere: pip and uv")
    assert claims.judge(c, {**both, "tests/t.py::test_load[9.2.3]": ("failed", "")}).state == "FAIL"
    # a text check proves no row: with only it run, nothing here is proven
    assert claims.judge(c, {"tests/t.py::test_yaml": ("passed", "")}).state == "NOT RUN"
    only_text = claims.Claim("arm", "a", [], [], "the arm runner", checks=["tests/t.py::test_yaml"])
    assert claims.judge(only_text, {"tests/t.py::test_yaml": ("passed", "")}).state == "ELSEWHERE"


def test_removing_a_rows_test_or_its_parameter_is_caught():
    entries = claims.load()
    torch = next(c for c in entries if c.id == "torch-row")
    assert len(torch.rows) > 3 and all(r.tests or r.elsewhere for r in torch.rows)
    bare = claims.Claim(torch.id, torch.claim, torch.at, [], rows=[claims.Row("9.2.3", [])], checks=torch.checks)
    assert claims.missing_tests([bare]) == ["torch-row: row '9.2.3' names no test and nowhere else"]
    gone_param = claims.Claim("p", "p", [], [], rows=[claims.Row(
        "9.9.9", ["tests/integration/test_fastmace_rules.py::test_cuda13_torch_from_pypi_loads_oeqs_precompiled_extension[9.9.9]"])])
    assert claims.missing_parameters([gone_param]) == [
        "p: tests/integration/test_fastmace_rules.py::test_cuda13_torch_from_pypi_loads_oeqs_precompiled_extension[9.9.9]"]
    assert claims.missing_parameters(entries) == []  # every [param] a row names is one the suite collects


def test_a_rows_load_stubs_are_printed_under_its_claim_exactly():
    """The sonames a stand-in row's tests recorded (record_property("load stubs", ...)) are printed under the claim,
    one line per distinct set; a row whose tests recorded none prints nothing."""
    rows = [claims.Row("aarch64", ["tests/t.py::test_arm"]), claims.Row("3.14", ["tests/t.py::test_new"])]
    c = claims.Claim("load", "l", [], [], rows=rows)
    results = {"tests/t.py::test_arm[pip]": ("passed", ""), "tests/t.py::test_arm[uv]": ("passed", ""),
               "tests/t.py::test_new": ("passed", "")}
    notes = {"load stubs": {"tests/t.py::test_arm[pip]": ["libcublasLt.so.13", "libcudnn.so.9"],
                            "tests/t.py::test_arm[uv]": ["libcublasLt.so.13", "libcudnn.so.9"]},
             "real NVIDIA libraries": {"tests/t.py::test_new": []}}
    lines, _ = claims.table([c], results, notes)
    assert lines[1:] == ["                 aarch64: load stubs (2, 2 test(s)): libcublasLt.so.13, libcudnn.so.9",
                         "                 3.14: real NVIDIA libraries (0, 1 test(s)): none"]
    assert claims.table([c], results)[0][1:] == []
