"""The dress rehearsal's plan: a real plan kept as written except for what a laptop cannot have.

    data = rehearsal_plan(yaml.safe_load(path.read_text()), {"gpt-oss-120b": built})

What changes (and `changes` lists it, for every page of the report):
- the engine: the simulated engine (tasks/engines/simulated), launched locally, answering from the synthetic data
  sets at their real output lengths, sized so that an Offline run lasts just over the round's min duration;
- the data: the synthetic full-size sets (`tasks.rehearsal.data`; a fraction of their rows with `podium rehearse
  --scale`, a quick rehearsal whose runs are smaller than the rules ask) and the byte-level tokenizer in place of
  the model (the plan's `fetch` sections are dropped: nothing is fetched); deepseek-r1's MATH-500 grader stays the
  real one, the folder given (`--math-grader`);
- the rates (`scenario_rates`): Offline at the lowest the rules allow; Server and Interactive at half the engine's
  Offline rate, never under the lowest the rules allow: their accuracy run and audits issue fixed sample counts
  (4395, 990 and 6396 for gpt-oss-120b), which at the lowest rate (1.22 q/s) would take 3.3 h of the client's clock;
- the names: plan and systems are prefixed `rehearsal-`; the system description's fields the plan leaves empty get
  labelled rehearsal values; storage is the local S3 server under a `rehearsal/` prefix;
- the gates: the Server/Offline ratio is reported, not gated, and nothing is compared with the published results.
Everything else (division, profile, min durations, sample counts, audits, generation settings) is the plan's.
"""

from __future__ import annotations

import copy
import math
import os
from typing import Any

from submission.rules import load_rules
from submission.tree.rehearsal_marker import PREFIX
from tasks.clock import slower
from tasks.endpoints.probe import P99_MIN_SAMPLES
from tasks.rehearsal.data import Built, answers_file

STORAGE_PREFIX = "rehearsal"
SCALE_ENV = "PODIUM_REHEARSAL_SCALE"
LABEL = "rehearsal placeholder, not a fact of the plan's system"
MARGIN = 1.1            # runs last 10% over the round's minimum: min_duration and the early-stopping sample count
CHUNK_TOKENS = 4096     # tokens per streamed event after the first: 32M accuracy tokens in a few events per answer
TPOT_SHARE = 0.4        # the engine's empty-batch TPOT as a share of the tightest TPOT (or e2e) limit of the plan
TPOT_LOAD = 0.5         # a full batch is 1.5x slower per token: a full batch stays within the limit
SERVED_SHARE = 0.5      # Server and Interactive: half the Offline rate (a full batch is never reached)
PREFILL = {"prefill_workers": 8, "prefill_ms": 20.0}   # 400 prompts/s: prefill never limits the rehearsal


def scale() -> float:
    """The fraction of their rows the rehearsal's data sets hold (`podium rehearse --scale`, passed to the flow in
    SCALE_ENV): 1, the reference's sizes, unless asked."""
    return float(os.environ.get(SCALE_ENV) or 1)


def changes(clock: float | None, scale: float = 1.0) -> list[str]:
    """What a rehearsal replaces, one line each: said on every page of its output (`scale`: the data sets' fraction
    of their rows)."""
    speed = "the real clock (--clock real)" if not clock else \
        f"an accelerated clock, x{clock:g} (libfaketime): 600 s of the client's clock take {600 / clock:.0f} s"
    fallback = slower(clock) if clock else ()
    again = (f"; a run INVALID for its latency alone runs again with the client on "
             f"{', then '.join(f'x{f:g}' for f in fallback)} (tasks.clock)") if fallback else ""
    data = ("synthetic data sets at the reference's sizes and schemas, with answers the engine knows" if scale == 1
            else f"synthetic data sets in the reference's schemas at {scale:g} of their rows (--scale), with answers "
                 "the engine knows: the runs are smaller than the rules ask and the checkers say so")
    return ["engine: Podium's simulated engine on this machine, not the plan's engine and hardware", f"data: {data}",
            f"clock: the measuring client and the engine run on {speed}; everything else on the real clock{again}",
            "rates: Offline at the lowest the round's rules allow, Server and Interactive at half that, not the plan's "
            "targets (the real round's cost is estimated); no performance gate, no comparison with published results"]


def scenario_rates(plan: dict[str, Any], bench: dict[str, Any], rows: dict[str, int]) -> dict[str, float]:
    """Scenario -> the rehearsal's target QPS. Offline issues the performance set once over `MARGIN` x min_duration
    (the lowest the round allows). Server and Interactive run at `SERVED_SHARE` of that rate (the engine is sized for
    it, so half leaves room), and never under the lowest the round allows: the early-stopping p99's minimum sample
    count (P99_MIN_SAMPLES, loadgen's early_stopping.cc and the endpoints client alike) over min_duration, with
    `MARGIN`."""
    rules = load_rules(plan["round"])
    seconds = rules.min_duration_ms / 1000
    offline = math.floor(100 * rows["Offline"] / (seconds * MARGIN)) / 100 if "Offline" in rows else 0.0
    lowest = math.ceil(100 * P99_MIN_SAMPLES * MARGIN / seconds) / 100
    served = math.floor(100 * SERVED_SHARE * offline) / 100
    return {name: offline if name == "Offline" else max(lowest, served) for name in bench["scenarios"]}


def engine_options(plan: dict[str, Any], bench: dict[str, Any], built: Built, rows: dict[str, int],
                   output: dict[str, float]) -> dict[str, Any]:
    """The simulated engine's options: prefill never limits; TPOT a share of the plan's tightest limit; decode slots
    so that the Offline performance set (`rows`, `output`: its mean answer length) takes MARGIN x min_duration."""
    rules = load_rules(plan["round"])
    scenarios = rules.benchmark(bench["benchmark"]).scenario
    limits = [scenarios(n).tpot_ms for n in bench["scenarios"] if scenarios(n).tpot_ms]
    limits += [scenarios(n).latency_ms / max(output["p99"], 1) for n in bench["scenarios"] if scenarios(n).latency_ms]
    tpot_ms = round(TPOT_SHARE * min(limits or [80.0]), 3)
    seconds = rules.min_duration_ms / 1000 * MARGIN
    per_request_s = (output["mean"] - 1) * tpot_ms * (1 + TPOT_LOAD) / 1000
    slots = max(1, math.ceil(rows["Offline"] / seconds * per_request_s)) if "Offline" in rows else 64
    return {**PREFILL, "decode_workers": 1, "decode_slots": slots, "tpot_ms": tpot_ms, "tpot_load": TPOT_LOAD,
            "output_tokens": max(2, round(output["mean"])), "chunk_tokens": CHUNK_TOKENS,
            "answers": list(built.answers)}


def output_lengths(path: str) -> dict[str, float]:
    """Mean and p99 answer length (tokens) the simulated engine serves for the data set at `path`."""
    import numpy as np
    import pyarrow.parquet as pq

    from tasks.engines.simulated.answers import OUTPUT_TOKENS

    values = pq.read_table(answers_file(path), columns=[OUTPUT_TOKENS]).column(0).to_numpy()
    return {"mean": float(values.mean()), "p99": float(np.percentile(values, 99))}


def describe(system: dict[str, Any], round: str) -> dict[str, str]:
    """The plan's description, every field the checker requires non-empty and the plan leaves out given a labelled
    rehearsal value (the plan's own entries, as system_name or division, come from the plan)."""
    fields = load_rules(round).system_fields
    own = {"division", "submitter", "system_type", "status", "system_name", "number_of_nodes", "framework"}
    given = dict(system.get("description") or {})
    return given | {f: LABEL for f in fields.non_empty if f not in given and f not in own}


def rehearsal_plan(plan: dict[str, Any], built: dict[str, Built], *, inference_src: str | None = None,
                   math_grader: str | None = None) -> dict[str, Any]:
    """The rehearsal of `plan` (its YAML data, unchanged): see the module's docstring. `built`: benchmark -> its
    synthetic data (`tasks.rehearsal.data.build`); `math_grader`: the fetched openai/prm800k that deepseek-r1's score
    runs (real, as inference_src: `podium fetch-grader` prints it), in place of the plan's own folder."""
    out = copy.deepcopy(plan)
    out["name"] = PREFIX + plan["name"]
    names = {s["name"]: PREFIX + s["name"] for s in plan["systems"]}
    out["systems"] = [{**{k: v for k, v in s.items() if k != "work_pool"}, "name": names[s["name"]],
                       "description": describe(s, plan["round"])} for s in plan["systems"]]
    out["benchmarks"] = [_benchmark(plan, b, built[b["benchmark"]], names) for b in plan["benchmarks"]]
    for bench in out["benchmarks"]:
        if math_grader and "math_grader" in bench["dataset"]:
            bench["dataset"]["math_grader"] = math_grader
    out["storage"] = {"bucket": plan["storage"]["bucket"], "embedded": True,
                      "prefix": "/".join(p for p in (STORAGE_PREFIX, plan["storage"].get("prefix", "")) if p)}
    # the simulated engine's numbers at the rehearsal's own rates: the Server/Offline ratio is reported, not gated
    out["gates"] = {**plan.get("gates", {}), "server_offline_min_ratio": None, "published_min_fraction": None}
    out.pop("fetch", None)   # nor the plan's own: the rehearsal's inference_src is the one given
    if inference_src:
        out["inference_src"] = inference_src
    return out


def _benchmark(plan: dict[str, Any], bench: dict[str, Any], built: Built, names: dict[str, str]) -> dict[str, Any]:
    out = copy.deepcopy(bench)
    out["system"] = names[bench["system"]]
    out.pop("fetch", None)   # the rehearsal reads its own synthetic data, nothing fetched
    for field, path in built.plan.items():   # dataset.performance, dataset.compliance.TEST07, model.source ...
        *parents, last = field.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = path
    if "lcb_tests" in built.extra:
        out["dataset"]["lcb_tests"] = built.extra["lcb_tests"]
    datasets = {name: out["dataset"].get("scenarios", {}).get(name, out["dataset"]["performance"])
                for name in bench["scenarios"]}
    rows = {name: issued(plan, bench, name, output_rows(path)) for name, path in datasets.items()}
    output = output_lengths(out["dataset"]["performance"])
    engine = bench["engine"]
    kept = {k: engine[k] for k in ("ready_timeout_s", "stall_timeout_s", "warmup_requests", "warmup_timeout_s")
            if k in engine}
    out["engine"] = {"name": "simulated", "launcher": "local", **kept,
                     "options": engine_options(plan, bench, built, rows, output)}
    rates = scenario_rates(plan, bench, rows)
    # the real system's expected_qps is not the simulated stand-in's: its rates are these
    out["scenarios"] = {name: {**{k: v for k, v in sc.items() if k != "expected_qps"}, "target_qps": rates[name]}
                        for name, sc in bench["scenarios"].items()}
    return out


def issued(plan: dict[str, Any], bench: dict[str, Any], scenario: str, rows: int) -> int:
    """The samples a scenario's performance run issues over a data set of `rows`: a loadgen Offline run at least the
    round's mlperf.conf min_query_count for the benchmark (deepseek-r1: 4388, whatever `--scale` leaves of the set);
    the endpoints client issues the set once."""
    rules = load_rules(plan["round"]).benchmark(bench["benchmark"])
    if scenario != "Offline" or (bench.get("harness") or rules.harness) != "loadgen":
        return rows
    return max(rows, rules.offline_min_query_count or 0)


def output_rows(path: str) -> int:
    """Rows of the data set at `path` (of the parquet file that serves it: `answers_file`)."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(answers_file(path)).metadata.num_rows
