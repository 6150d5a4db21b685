"""The system description `systems/<system>.json`: host detection, documented defaults and the checker's field rules.

Which fields must exist, which must be non-empty and which values are allowed come from the round's rules
(`system_fields` in `rules/<round>.yaml`, i.e. checker constants.py and checks/system_check.py). Detection
(submission/tree/host_facts.py) is best effort: a probe that cannot read a fact leaves the field to the defaults and
never raises. Every value is a string. A closed submission takes no default that is a guess (`gaps`).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping

from submission.base.errors import PlanError
from submission.plan.platforms import platform_of
from submission.rules import load_rules
from submission.tree.host_facts import NOT_APPLICABLE, UNKNOWN, detect_host

_NETWORK_DIVISION = "network"


def _defaults(number_of_nodes: int, accelerators: str) -> dict[str, str]:
    """Documented defaults for what cannot be detected: "N/A" where the field cannot apply, else "unknown"."""
    has_accelerators = accelerators != "0"
    accel = UNKNOWN if has_accelerators else NOT_APPLICABLE
    accel_optional = "" if has_accelerators else NOT_APPLICABLE
    network = NOT_APPLICABLE if number_of_nodes == 1 else UNKNOWN
    return {"host_processors_per_node": "1", "host_processor_core_count": str(os.cpu_count() or 1),
            "operating_system": platform.platform(), "other_software_stack": f"Python {platform.python_version()}",
            "accelerators_per_node": "0", "accelerator_model_name": NOT_APPLICABLE,
            "accelerator_memory_capacity": NOT_APPLICABLE, "host_memory_configuration": UNKNOWN,
            "host_processor_interconnect": NOT_APPLICABLE, "host_networking": network,
            "host_networking_topology": network, "host_network_card_count": UNKNOWN,
            "accelerator_frequency": accel_optional, "accelerator_host_interconnect": accel,
            "accelerator_interconnect": accel, "accelerator_interconnect_topology": accel_optional,
            "accelerator_memory_configuration": accel, "accelerator_on-chip_memories": accel_optional,
            "cooling": "air", "hw_notes": "", "sw_notes": "", "system_type_detail": NOT_APPLICABLE}


# What detect_host can read from a node, by field: everything else comes from the plan or nowhere. amd-smi tells more
# of an AMD node's GPUs than nvidia-smi of an NVIDIA node's (submission/tree/host_facts.py).
DETECTABLE = frozenset({
    "host_processor_model_name", "host_processors_per_node", "host_processor_core_count", "host_processor_frequency",
    "host_processor_caches", "host_memory_capacity", "host_storage_capacity", "host_storage_type", "operating_system",
    "host_network_card_count", "accelerators_per_node", "accelerator_model_name", "accelerator_memory_capacity",
    "other_software_stack"})
DETECTABLE_BY_PLATFORM = {"nvidia": DETECTABLE,
                          "amd": DETECTABLE | {"accelerator_memory_configuration", "accelerator_host_interconnect"}}
Source = str   # where a field's value came from: "plan", "detected", "default" or "unset"


def describe(*, division: str, submitter: str, system_name: str, status: str, system_type: str, number_of_nodes: int,
             framework: str, overrides: Mapping[str, str], host: Mapping[str, str] | None = None,
             round: str = "v6.1") -> dict[str, str]:
    """Every required field of the round, in the rules' order: overrides > host detection > documented defaults.

    A must-be-non-empty field never takes an empty value from overrides or the host; fields in `overrides` that the
    round does not require (is_network, power fields) follow the required ones.
    """
    return describe_sourced(division=division, submitter=submitter, system_name=system_name, status=status,
                            system_type=system_type, number_of_nodes=number_of_nodes, framework=framework,
                            overrides=overrides, host=host, round=round)[0]


def describe_sourced(*, division: str, submitter: str, system_name: str, status: str, system_type: str,
                     number_of_nodes: int, framework: str, overrides: Mapping[str, str],
                     host: Mapping[str, str] | None = None,
                     round: str = "v6.1") -> tuple[dict[str, str], dict[str, Source]]:
    """`describe`, and where each required field's value came from (`plan`, `detected`, `default`, `unset`)."""
    if number_of_nodes < 1:
        raise PlanError(f"number_of_nodes is {number_of_nodes}", fix="give the number of nodes, at least 1")
    fields = load_rules(round).system_fields
    given = {"division": division, "submitter": submitter, "system_name": system_name, "status": status,
             "system_type": system_type, "number_of_nodes": str(number_of_nodes), "framework": framework}
    clashes = [f"{key}={overrides[key]!r} (argument {value!r})" for key, value in given.items()
               if key in overrides and overrides[key] != value]
    if clashes:
        raise PlanError(f"system overrides contradict the system's settings: {', '.join(clashes)}",
                        fix="remove these fields from the overrides; they come from the plan's system entry")
    found = dict(detect_host() if host is None else host)
    gpus = overrides.get("accelerators_per_node") or found.get("accelerators_per_node", "0")
    defaults = _defaults(number_of_nodes, gpus)
    desc: dict[str, str] = {}
    sources: dict[str, Source] = {}
    for field in fields.required:
        if field in given:  # the plan's own values, kept even when empty so that validate reports them
            desc[field], sources[field] = given[field], "plan"
            continue
        needs_value = field in fields.non_empty
        candidates = [(tier[field], name) for name, tier in (("plan", overrides), ("detected", found),
                                                               ("default", defaults))
                      if field in tier and (tier[field] or not needs_value)]
        desc[field], sources[field] = candidates[0] if candidates else (UNKNOWN if needs_value else "", "unset")
    desc.update({key: value for key, value in overrides.items() if key not in desc})
    return desc, sources


def gaps(desc: Mapping[str, str], sources: Mapping[str, Source], round: str = "v6.1") -> list[str]:
    """The fields the checker requires non-empty that hold no fact about this system: "unknown", or a default that
    is a guess rather than "N/A" (cooling "air", the flow host's core count). A closed submission refuses these."""
    fields = load_rules(round).system_fields
    return [field for field in fields.non_empty
            if desc.get(field) == UNKNOWN or (sources.get(field) in ("default", "unset")
                                              and desc.get(field) != NOT_APPLICABLE)]


def forecast(overrides: Mapping[str, str], number_of_nodes: int, round: str = "v6.1") -> list[tuple[str, Source]]:
    """Before anything is detected (the dry run): each field the checker requires non-empty that the plan does not
    give, and where Podium would take it from: `detected` (on the engine's node, by its platform's tool), `N/A` (it
    cannot apply to this system) or `nowhere` (the plan must give it)."""
    fields = load_rules(round).system_fields
    defaults = _defaults(number_of_nodes, overrides.get("accelerators_per_node") or "1")
    detectable = DETECTABLE_BY_PLATFORM[platform_of(overrides).name]
    out: list[tuple[str, Source]] = []
    for field in fields.non_empty:
        if field in overrides or field in ("division", "submitter", "system_type", "status", "system_name",
                                             "number_of_nodes", "framework"):   # the plan's own entries
            continue
        if field in detectable:
            out.append((field, "detected"))
        elif defaults.get(field) == NOT_APPLICABLE:
            out.append((field, NOT_APPLICABLE))
        else:
            out.append((field, "nowhere"))
    return out


def validate(desc: Mapping[str, object], *, division: str, submitter: str, round: str = "v6.1") -> list[str]:
    """Every problem the MLPerf checker (and then some) would find, one line each: the field, then the fix."""
    fields = load_rules(round).system_fields
    problems = [f"{field}: missing; add it (every required field must exist, \"\" where the rules allow)"
                for field in fields.required if field not in desc]
    for field in fields.non_empty:
        value = desc.get(field)
        if field in desc and (not value or (isinstance(value, str) and not value.strip())):
            problems.append(f"{field}: empty; give a meaningful value (\"{NOT_APPLICABLE}\" where it does not apply)")
    for field, allowed in fields.allowed.items():
        value = desc.get(field)
        if not value:
            continue  # already reported as missing or empty
        fold = field in fields.case_insensitive
        if (str(value).lower() if fold else value) not in allowed:
            case = " (any case)" if fold else " (exact string)"
            problems.append(f"{field}: {value!r} is not allowed; use one of {', '.join(allowed)}{case}")
    for field, folder in (("division", division), ("submitter", submitter)):
        value = desc.get(field)
        if value and str(value).lower() != folder.lower():
            problems.append(f"{field}: {value!r} differs from the {field} folder {folder!r}; set it to {folder!r}")
    if "is_network" in desc:
        expected = "true" if division.lower() == _NETWORK_DIVISION else "false"
        value = desc["is_network"]
        if not isinstance(value, str) or value.lower() != expected:
            problems.append(f"is_network: {value!r} in the {division} division; set it to the string "
                            f"{expected!r}" + ("" if expected == "true" else " or remove it"))
    return problems


def require_complete(desc: Mapping[str, object], *, division: str, submitter: str, round: str = "v6.1") -> None:
    """Raise one PlanError listing every problem `validate` finds (preflight runs this before any GPU time)."""
    problems = validate(desc, division=division, submitter=submitter, round=round)
    if problems:
        name = desc.get("system_name") or "?"
        lines = "\n".join(f"  - {problem}" for problem in problems)
        raise PlanError(f"system description {name!r} has {len(problems)} problem(s):\n{lines}",
                        fix="correct each field listed above in the plan's system entry or its overrides")
