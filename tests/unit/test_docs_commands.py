"""The manual names only `make` targets the Makefile has: every `make ...` in a code span or block of README.md and
docs/*.md, read as the command it is."""

from __future__ import annotations

import re

from tests.manual import REPO, code, pages

TARGET = re.compile(r"^([A-Za-z][\w-]*)\s*:(?!=)", re.MULTILINE)


def make_targets(makefile: str) -> set[str]:
    return set(TARGET.findall(makefile))


def named_targets(markdown: str) -> list[str]:
    """The targets of every `make` command in the code of a Markdown text (VAR=value and options skipped)."""
    found = []
    for snippet in code(markdown):
        for line in snippet.strip("`").splitlines():
            for command in re.split(r"&&|\|\||;|\|", line.split(" # ")[0]):
                words = command.split()
                while words and "=" in words[0]:   # an environment assignment before the command
                    words.pop(0)
                if words[:1] == ["make"]:
                    found += [w for w in words[1:] if "=" not in w and not w.startswith("-")]
    return found


def test_every_make_target_the_docs_name_exists() -> None:
    targets = make_targets((REPO / "Makefile").read_text())
    assert {"install", "test", "venv-endpoints"} <= targets
    for doc in pages():
        missing = sorted(set(named_targets(doc.read_text())) - targets)
        assert not missing, f"{doc.relative_to(REPO)} names make target(s) the Makefile lacks: {missing}"


def test_the_reader_finds_a_missing_target() -> None:
    text = "Run `make venv` first, then:\n```bash\nTEST_WORKERS=2 make test -j2  # all\nmake venv-vllm venv-x\n```\n"
    assert named_targets(text) == ["venv", "test", "venv-vllm", "venv-x"]
    assert "venv" not in make_targets("install: $(STAMP)\nSTAMP := x\nvenv-vllm: install\n")
