"""What `podium submit` says about preprocess_submission.py at the v6.1 pin, without the script: its traceback read
(the lines as the script printed them on the closed corpus, mlcommons/inference b66003e1), and the endpoints results
it drops found in what it changed. tests/unit/test_checker_corpus.py runs the real script where PODIUM_INFERENCE_SRC
names a checkout."""

from __future__ import annotations

import shutil
from pathlib import Path

from submission.checks.preprocess import PreprocessDroppedResults, PreprocessFailed, endpoints_dropped
from submission.tree.changes import compare
from submission.tree.paths import Tree
from tests import checker_corpus as corpus

TEST07_TRACEBACK = """\
  File "<src>/tools/submission/preprocess_submission.py", line 275, in clean_invalid_results
    if not checker.check_compliance_dir(
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "<src>/tools/submission/submission_checker_old.py", line 3789, in check_compliance_dir
    compliance_acc_pass &= check_compliance_acc_dir(
                           ^^^^^^^^^^^^^^^^^^^^^^^^^
  File "<src>/tools/submission/submission_checker_old.py", line 3669, in check_compliance_acc_dir
    raise NotImplemented(
          ^^^^^^^^^^^^^^^
TypeError: 'NotImplementedType' object is not callable"""
SRC_TRACEBACK = """\
  File "<src>/tools/submission/preprocess_submission.py", line 334, in clean_invalid_results
    shutil.copytree(model_code_path, target_code_path)
FileNotFoundError: [Errno 2] No such file or directory: 'closed/Podium/src/gpt-oss-120b'"""


def test_the_test07_crash_is_named_with_its_lines_and_the_way_past_it() -> None:
    error = PreprocessFailed(["python", "preprocess_submission.py"], 1, TEST07_TRACEBACK)
    message = str(error)
    assert message.startswith("preprocess_submission.py exited with code 1: TypeError: 'NotImplementedType' object")
    for words in ("known defect at mlcommons/inference b66003e1", "closed result with TEST07", "Its line 275",
                  "submission_checker_old.py line 3669", "compliance_check.py line 147", "no later"):
        assert words in message, words
    assert error.final and error.exit_code == 4 and "leave out --preprocess" in message


def test_another_failure_is_not_called_a_known_defect() -> None:
    error = PreprocessFailed(["python", "preprocess_submission.py"], 1, SRC_TRACEBACK)
    assert error.known is None and "known defect" not in str(error)
    assert str(error).splitlines()[0].endswith("No such file or directory: 'closed/Podium/src/gpt-oss-120b'")


def test_dropped_endpoints_results_are_found_and_loadgen_ones_are_not(tmp_path: Path) -> None:
    """What the script does to the corpus's qwen3-vl folders (removes Offline, moves Interactive to open) against a
    loadgen folder it drops for a reason of its own: only the endpoints folders are its defect."""
    tree = Tree(tmp_path / "tree", "closed", corpus.ORG)
    for sc in ("Offline", "Interactive"):
        corpus.qwen_scenario(tree, sc)
    loadgen = tree.performance(corpus.SYSTEM, corpus.GPT, "Offline") / "mlperf_log_detail.txt"
    loadgen.parent.mkdir(parents=True)
    loadgen.write_text("{}\n")
    after = tmp_path / "after"
    shutil.copytree(tree.root, after)
    assert endpoints_dropped(tree.root, compare(tree.root, after)) == []
    results = Path("closed", corpus.ORG, "results", corpus.SYSTEM)
    shutil.rmtree(after / results / corpus.QWEN / "Offline")
    shutil.rmtree(after / results / corpus.GPT)
    shutil.move(after / results / corpus.QWEN / "Interactive", tmp_path / "moved")
    dropped = endpoints_dropped(tree.root, compare(tree.root, after))
    assert dropped == [f"{results}/{corpus.QWEN}/Interactive", f"{results}/{corpus.QWEN}/Offline"]
    message = str(PreprocessDroppedResults(dropped))
    assert "dropped 2 endpoints-layout result(s)" in message and "lines 205-230" in message
    assert "leave out --preprocess" in message
