"""`podium search | sweep | scale` fail on bad input before anything starts, with the field and the fix."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from flows.cli import app


def test_a_bad_plan_fails_before_anything_starts(tmp_path: Path) -> None:
    plan = tmp_path / "bad.yaml"
    plan.write_text("name: x\nround: v6.1\n")
    for command in (["search", str(plan)], ["sweep", str(plan), "--gpus", "4"], ["scale", str(plan)]):
        result = CliRunner().invoke(app, [*command, "--workspace", str(tmp_path / "ws")])
        assert result.exit_code != 0 and "invalid plan" in result.output, result.output
        assert not (tmp_path / "ws" / "search").exists()


def test_help_names_the_options() -> None:
    result = CliRunner().invoke(app, ["sweep", "--help"])
    assert result.exit_code == 0
    for option in ("--gpus", "--prefill-tp", "--decode-tp", "--nodes", "--precision", "--probe-queries", "--out"):
        assert option in result.output
