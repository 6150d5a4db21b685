"""The two reference pages generated from the code, so neither can drift, and the MkDocs hook (mkdocs.yml `hooks`)
that builds the site from what the code generates.

- `plan.md`: every field of a plan, from the plan's pydantic models (submission/plan/model.py) through their JSON
  schema: each model a table of its fields with type, default and description; the typed `engine.options` of each
  engine (submission/plan/engine_options.py) and `engine.slurm` (submission/plan/slurm_options.py) after them.
- `cli.md`: every `podium` command, its arguments and options, from the Typer app (flows/cli.py) by Typer's own
  Markdown generation, the text `podium COMMAND --help` prints.

Both are committed in docs/, so a link to them resolves in the checkout and on GitHub as on the site. After a change
to the plan's models or the command line, `python docs/hooks.py` writes them again; the site's build warns (and so
fails, built with --strict) while a committed page differs from what the code generates, and so does
tests/unit/test_docs_pages.py.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))   # this checkout's packages, not an installed copy
PLAN_PAGE, CLI_PAGE = "plan.md", "cli.md"
REGENERATE = "python docs/hooks.py"


def generated() -> dict[str, str]:
    """Each generated page's name in docs/ and its text, as the code makes it now."""
    return {PLAN_PAGE: plan_reference(), CLI_PAGE: cli_reference()}


def stale(pages: dict[str, str]) -> list[str]:
    """The generated `pages` whose committed file is missing or differs."""
    return [name for name, text in pages.items() if not (DOCS / name).is_file() or (DOCS / name).read_text() != text]


def on_files(files: Any, config: Any) -> Any:
    """The site's generated pages from the code, whatever the committed files hold; a warning for each that differs."""
    from mkdocs.plugins import get_plugin_logger
    from mkdocs.structure.files import File

    log = get_plugin_logger("hooks")
    for name, text in generated().items():
        committed = files.get_file_from_path(name)
        if committed is not None:
            if committed.content_string != text:
                log.warning(f"docs/{name} is not what the code generates: run `{REGENERATE}` and commit it")
            files.remove(committed)
        files.append(File.generated(config, name, content=text))
    return files


def main() -> None:
    """Write the generated pages into docs/ (each atomically), and say which changed."""
    from submission.base.files import write_atomic

    pages = generated()
    for name in stale(pages):
        write_atomic(DOCS / name, pages[name])
        print(f"wrote docs/{name}")


# ----- the plan ------------------------------------------------------------------------------------------------
def plan_reference() -> str:
    from pydantic import BaseModel

    from submission.plan.engine_options import OPTIONS
    from submission.plan.limits import MAX_DEPTH
    from submission.plan.model import Plan
    from submission.plan.slurm_options import SlurmSettings

    out = ["# Plan fields", "",
           "Every field a plan may set, generated from the plan's models (`submission/plan/model.py` and the engine "
           "options beside it) when this site is built. A plan is one YAML mapping; a key that is not listed here is "
           "refused when the plan loads, with the field's path and the fix, and so is a value of the wrong type or "
           "out of its range. Every number is finite (`.inf` and `.nan` are refused); the largest rates, node counts "
           "and sequence lengths (≤ in the tables) lie far above any real system's, each bound citing its source in "
           f"`submission/plan/limits.py`. A plan is UTF-8 text, nested at most {MAX_DEPTH} levels deep. *required* "
           "marks a field without a default. Shipped examples: `deployments/plans/`. A fleet's plan may instead "
           "list other plan files under `plans:` (`{file, work_pool}` each), standing for their systems and "
           "benchmarks together ([The round as one fleet](fleet.md#the-round-as-one-fleet)).", ""]
    out += _models(Plan, "plan", "The plan")
    engines: dict[type[BaseModel], list[str]] = {}
    for name, model in OPTIONS.items():
        engines.setdefault(model, []).append(name)
    for model, names in engines.items():
        title = f"`benchmarks[].engine.options` of `{'`, `'.join(names)}`"
        out += _models(model, f"options-{names[0]}", title, path="benchmarks[].engine.options")
    out += _models(SlurmSettings, "slurm", "`benchmarks[].engine.slurm`", path="benchmarks[].engine.slurm")
    return "\n".join(out) + "\n"


def _models(model: Any, anchor: str, title: str, path: str = "") -> list[str]:
    """One section per model reachable from `model`, in the order a reader meets them, named by the paths that lead
    to it (one model may sit at two places, e.g. Dynamo's prefill and decode pools)."""
    schema = model.model_json_schema()
    defs = {**schema.get("$defs", {}), model.__name__: schema}
    order, paths, anchors = [model.__name__], {model.__name__: [path]}, {model.__name__: anchor}
    for name in order:   # grows while it is read: every model once, first reached first
        for field, spec in defs[name].get("properties", {}).items():
            where = f"{paths[name][0]}.{field}" if paths[name][0] else field
            where += "[]" if spec.get("type") == "array" else ".<name>" if spec.get("type") == "object" else ""
            for ref in _refs(spec):
                if ref not in anchors:
                    order.append(ref)
                    anchors[ref] = f"{anchor}-{field}".replace("_", "-")
                    paths[ref] = []
                if where not in paths[ref]:
                    paths[ref].append(where)
    out = []
    for name in order:
        node = defs[name]
        heading = title if name == model.__name__ else ", ".join(f"`{p}`" for p in paths[name])
        out += [f"## {heading} {{#{anchors[name]}}}", ""]
        if node.get("description"):
            out += [_literal(" ".join(node["description"].split())), ""]
        links = {n: (anchors[n], paths[n][0] or title) for n in order}
        rows = [(f"`{field}`", _type(spec, links), _default(field, spec, node), _description(spec))
                for field, spec in node.get("properties", {}).items()]
        out += [*_table(rows), ""]
    return out


def _refs(spec: dict) -> list[str]:
    """The models a field's type names, anywhere in it."""
    found = []
    if "$ref" in spec:
        found.append(spec["$ref"].rsplit("/", 1)[-1])
    for key in ("anyOf", "oneOf", "allOf"):
        for option in spec.get(key, []):
            found += _refs(option)
    for key in ("items", "additionalProperties"):
        if isinstance(spec.get(key), dict):
            found += _refs(spec[key])
    return found


def _type(spec: dict, links: dict[str, tuple[str, str]]) -> str:
    """The type of a field in words; a model as a link to its own table, named by its path."""
    if "$ref" in spec:
        anchor, label = links[spec["$ref"].rsplit("/", 1)[-1]]
        return f"[`{label}`](#{anchor})"
    for key in ("anyOf", "oneOf"):
        if key in spec:
            options = [o for o in spec[key] if o.get("type") != "null"]
            text = " or ".join(_type(o, links) for o in options)
            return text + (" or null" if len(options) < len(spec[key]) else "")
    if "const" in spec:
        return f"`{json.dumps(spec['const'])}`"
    if "enum" in spec:
        return "one of " + ", ".join(f"`{v}`" for v in spec["enum"])
    kind = spec.get("type", "any")
    if kind == "array":
        return f"list of {_type(spec.get('items', {}), links)}" + _bounds(spec, " items")
    if kind == "object":
        values = spec.get("additionalProperties")
        return f"mapping of name to {_type(values, links)}" if isinstance(values, dict) else "mapping"
    return kind + _bounds(spec)


BOUNDS = {"minimum": "≥", "exclusiveMinimum": ">", "maximum": "≤", "exclusiveMaximum": "<", "minItems": "≥",
          "maxItems": "≤", "minLength": "length ≥", "maxLength": "length ≤"}


def _bounds(spec: dict, unit: str = "") -> str:
    parts = [f"{sign} {spec[key]}" for key, sign in BOUNDS.items() if key in spec]
    return (" " + ", ".join(parts) + unit) if parts else ""


def _default(field: str, spec: dict, node: dict) -> str:
    if field in node.get("required", []):
        return "*required*"
    if "default" not in spec:
        return "its fields' defaults" if _refs(spec) and "additionalProperties" not in spec else "empty"
    value = spec["default"]
    if isinstance(value, dict) and ("$ref" in spec or any("$ref" in o for o in spec.get("anyOf", []))):
        return "its fields' defaults"
    return f"`{json.dumps(value)}`"


def _description(spec: dict) -> str:
    return _literal(" ".join(spec.get("description", "").split()))


def _table(rows: list[tuple[str, str, str, str]]) -> list[str]:
    escape = str.maketrans({"|": "\\|"})
    lines = ["| field | type | default | description |", "| --- | --- | --- | --- |"]
    lines += ["| " + " | ".join(c.translate(escape) for c in row) + " |" for row in rows]
    return lines


# ----- the command line ----------------------------------------------------------------------------------------
def cli_reference() -> str:
    import typer
    import typer.main
    from typer.cli import get_docs_for_click

    from flows.cli import app

    command = typer.main.get_command(app)
    text = get_docs_for_click(obj=command, ctx=typer.Context(command, info_name="podium"), name="podium",
                              title="Command line")
    intro = ("Every `podium` command with its arguments and options, generated from the command's own definitions "
             "(`flows/cli.py`) when this site is built: the same text `podium COMMAND --help` prints. A command "
             "that fails prints one `error:` line with the fix and no traceback, and exits with its error's code "
             "(`podium check` has codes of its own, below):")
    title, _, rest = text.partition("\n\n")
    return f"{title}\n\n{intro}\n\n" + "\n".join(_exit_codes()) + f"\n\n{_literal(rest.strip())}\n"


def _literal(markdown: str) -> str:
    """Help text as written: `<tree>` outside code is text, not an HTML tag (code spans and blocks kept as they are)."""
    parts = re.split(r"(^```.*?^```|`[^`\n]*`)", markdown, flags=re.DOTALL | re.MULTILINE)
    return "".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(parts))


def _exit_codes() -> list[str]:
    """Each error class of submission/base/errors.py with its exit code, the first line of its docstring."""
    from submission.base import errors

    rows = ["| exit code | error | when |", "| --- | --- | --- |", "| 0 | | done |"]
    found = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.PodiumError)]
    for error in sorted(found, key=lambda c: (c.exit_code, c.__name__)):
        when = " ".join((error.__doc__ or "").split(". ")[0].split())
        rows.append(f"| {error.exit_code} | `{error.__name__}` | {when.rstrip('.')} |")
    return rows


if __name__ == "__main__":
    main()
