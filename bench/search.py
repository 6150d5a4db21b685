"""Peak-QPS search on a server of known capacity: Podium's search against a linear sweep and loadgen's own
FindPeakPerformance mode. How many seconds of load each spends, and how close to the true maximum it lands.

The server is Podium's simulated one (tasks/engines/simulated/server.py); its true maximum for a full-length Server run
is known exactly (`max_valid_qps`: loadgen's fixed-seed schedule replayed through the same model with loadgen's rules).

    python bench/search.py [--mode live|virtual|both] [--reps 3] [--configs decode-bound,tpot-bound]
                           [--probe-queries 640] [--full-queries 2048] [--virtual-full 2048,6400,10s] [--merge]

Methods (every one starts from the same measured Offline throughput, a 10 s Offline run, which is not counted):
  podium      tasks.tuning.bisection: probes of --probe-queries queries, bracket from Offline, bisection to 2 % (aimed
              by the p99 margins), one full-length confirmation (stepping down if it fails); "refine_up" (virtual
              only) then also climbs with full-length runs, for when short probes are pessimistic
  linear      full-length runs from the Offline throughput down in steps of 1.5 % of it; the first VALID one wins
  findpeak    loadgen TestMode.FindPeakPerformance (Server): lower bound 0.5 x Offline, boundary step 1 (doubling),
              decimals of precision 0 (1 q/s); every step a full-length run, judged by p99 alone (no early stopping)

`live` runs the real loadgen through Podium's harness against the real HTTP server (median of --reps); `virtual`
asks the model instead (deterministic, seconds computed from loadgen's schedule plus 1.5 s to start each run), so
the algorithms compare on many configurations in a moment. A full-length run is 2048 or 6400 queries (at least 1 s),
or "10s": at least 10 s (and 640 queries), as a plan's min_duration bounds it; a regime whose 10 s run is under two
probes' queries is left out of "10s" (its probes would be as long as its full-length runs). Each answer is checked by
an independent full-length run at it and one at 1.04 x it; "in full runs" is everything the method measured over the
seconds a full-length run at the answer took. Results: bench/results/search.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.findpeak import parse_steps
from submission.results.logs import load_run
from submission.results.runs import RunSpec
from submission.rules import load_rules
from tasks.engines import Endpoint
from tasks.engines.simulated import MODEL_NAME
from tasks.engines.simulated import config as sim_config
from tasks.engines.simulated.queueing import (
    PERCENTILE,
    Protocol,
    SimConfig,
    loadgen_schedule,
    max_valid_qps,
    query_count,
    replay,
    valid_at,
)
from tasks.harness.probe import run_probe
from tasks.launchers.local import free_port
from tasks.tuning.bisection import SearchSettings, full_run_seconds, search
from tasks.tuning.probes import ProbeCache, Prober, target_qps, with_rate
from tasks.tuning.simulated import judge

M, SAMPLES, TOKENS, WITHIN = "gpt-oss-120b", 32, 16, 0.02
RULES = load_rules("v6.1")
SERVER = RULES.benchmark(M).scenario("Server")
SEED = RULES.seeds.schedule_rng_seed
CONFIGS = {   # engine options of the simulated engine (submission.plan.engine_options.SimulatedOptions), by regime
    # TPOT-bound: a full batch's TPOT (60 ms) is near the 80 ms limit; the limit binds close to saturation
    "decode-bound": {"prefill_workers": 1, "prefill_ms": 3, "decode_workers": 2, "decode_slots": 32, "tpot_ms": 30,
                     "tpot_load": 1.0, "output_tokens": TOKENS, "chunk_tokens": 5},
    # latency rising with load before saturation: TPOT x5 in a full batch, the limit binds at 76 % of capacity
    "tpot-bound": {"prefill_workers": 1, "prefill_ms": 3, "decode_workers": 2, "decode_slots": 32, "tpot_ms": 20,
                   "tpot_load": 4.0, "output_tokens": TOKENS, "chunk_tokens": 5},
    # decode-slot-bound: TPOT barely grows with the batch; over capacity requests wait for a slot (TPOT grows late)
    "decode-slot-bound": {"prefill_workers": 1, "prefill_ms": 2, "decode_workers": 4, "decode_slots": 16,
                          "tpot_ms": 25, "tpot_load": 0.25, "output_tokens": TOKENS, "chunk_tokens": 5},
    # prefill (TTFT) bound: one 19 ms prefill worker; over capacity the prefill queue grows TTFT
    "prefill-bound": {"prefill_workers": 1, "prefill_ms": 19, "decode_workers": 4, "decode_slots": 64, "tpot_ms": 5,
                      "tpot_load": 0.0, "output_tokens": TOKENS, "chunk_tokens": 5},
    # regimes no test uses, to measure the search on servers it was not tuned on: decode-bound over 3 x 40 slots
    # (TPOT x2.4 in a full batch, capacity 139 q/s)
    "decode-wide": {"prefill_workers": 1, "prefill_ms": 5, "decode_workers": 3, "decode_slots": 40, "tpot_ms": 24,
                    "tpot_load": 1.4, "output_tokens": TOKENS, "chunk_tokens": 5},
    # TTFT-bound: two 29 ms prefill workers (69 q/s), decode far from full
    "ttft-two": {"prefill_workers": 2, "prefill_ms": 29, "decode_workers": 4, "decode_slots": 48, "tpot_ms": 7,
                 "tpot_load": 0.2, "output_tokens": TOKENS, "chunk_tokens": 5},
    # balanced: prefill (156 q/s) and decode (164 q/s) both near capacity
    "balanced": {"prefill_workers": 1, "prefill_ms": 6.4, "decode_workers": 2, "decode_slots": 24, "tpot_ms": 13,
                 "tpot_load": 0.5, "output_tokens": TOKENS, "chunk_tokens": 5},
}


def protocol(queries: int, min_duration_ms: int = 1000) -> Protocol:
    return Protocol(SERVER.ttft_ms, SERVER.tpot_ms, min_duration_ms, queries, SAMPLES, SEED, max_tokens=TOKENS)


def full_protocol(length: str, probe_queries: int) -> Protocol:
    """A full-length run: `length` queries (at least 1 s), or "<N>s": at least N seconds and a probe's queries."""
    if length.endswith("s"):
        return protocol(probe_queries, int(float(length[:-1]) * 1000))
    return protocol(int(length))


def spec(dataset: Path, scenario: str, conf: list[tuple[str, str]]) -> RunSpec:
    return RunSpec(plan="bench", profile="smoke", round="v6.1", system="cpu", benchmark=M, scenario=scenario,
                   mode="performance", loadgen_model=M, loadgen_scenario=scenario, user_conf=tuple(conf),
                   dataset=str(dataset), dataset_sha256="-", model_sha256="-", engine="simulated", max_tokens=TOKENS,
                   temperature=0.0, max_concurrency=512)


def server_spec(dataset: Path, qps: float, queries: int) -> RunSpec:
    return spec(dataset, "Server", [(f"{M}.Server.target_qps", f"{qps:g}"), (f"{M}.Server.min_duration", "1000"),
                                    (f"{M}.Server.min_query_count", str(queries)),
                                    (f"{M}.*.performance_sample_count_override", str(SAMPLES))])


def dataset(folder: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, 900, size=int(rng.integers(5, 40))).tolist() for _ in range(SAMPLES)]
    path = folder / "perf.parquet"
    pq.write_table(pa.table({"input_tokens": pa.array(prompts, type=pa.list_(pa.int32()))}), path)
    return path


OFFLINE_S = 10   # the Offline run that starts every method: long enough that its ramp-up is a few percent


def offline_samples(cfg: SimConfig) -> int:
    """Samples in the Offline run: loadgen's 1.1 x min_duration x expected rate (1.2 x capacity), padded to whole
    passes over the 32-sample set (sample_concatenate_permutation)."""
    n = int(1.1 * OFFLINE_S * 1.2 * cfg.capacity(TOKENS)) + 1
    return n + (-n) % SAMPLES


def offline_virtual(cfg: SimConfig) -> float:
    """What that Offline run measures on the model: samples / time of the last completion (loadgen's Offline)."""
    n = offline_samples(cfg)
    ttft, tpot = replay(cfg, np.zeros(n), TOKENS)
    return n / float(np.max(ttft + tpot * (TOKENS - 1)))


def outcome(answer: float | None, true: float, seconds: float, runs: int, valid: bool | None,
            full_runs: int | None = None) -> dict:
    error = None if answer is None else answer / true - 1
    return {"answer": answer, "error": None if error is None else round(error, 4), "seconds": round(seconds, 1),
            "runs": runs, "within_2pct": error is not None and -WITHIN <= error <= 0.001, "valid": valid,
            "full_runs": runs if full_runs is None else full_runs}


# ---------------------------------------------------------------- virtual: the model judges, time is computed

def _p99_ok(cfg: SimConfig, qps: float, p: Protocol) -> tuple[bool, float]:
    """Loadgen's PerfConstraintsMet alone (what FindPeakPerformance judges by) and the run's seconds."""
    n = query_count(SEED, qps, p.min_duration_ms, p.min_queries, SAMPLES)
    arrivals = loadgen_schedule(SEED, qps, n)
    ttft, tpot = replay(cfg, arrivals, TOKENS)
    at = int(n * PERCENTILE)
    ok = np.sort(ttft)[at] <= p.ttft_limit_ms / 1000 and np.sort(tpot)[at] <= p.tpot_limit_ms / 1000
    return bool(ok), float(np.max(arrivals + ttft + tpot * (TOKENS - 1))) + 1.5


def findpeak_virtual(cfg: SimConfig, lower: float, full: Protocol, decimals: int = 0) -> tuple[float, float, int]:
    """Loadgen's FindPeakPerformance (FindBoundaries doubling, then bisection to `decimals`) on the model."""
    ok, seconds = _p99_ok(cfg, lower, full)
    runs, low, high = 1, lower, lower * 2
    while True:
        ok, s = _p99_ok(cfg, high, full)
        runs, seconds = runs + 1, seconds + s
        if not ok:
            break
        low, high = high, high * 2
    scale = 10 ** decimals
    while np.floor(low * scale) + 1 < np.floor(high * scale):
        mid = low + (high - low) / 2
        ok, s = _p99_ok(cfg, mid, full)
        runs, seconds = runs + 1, seconds + s
        low, high = (mid, high) if ok else (low, mid)
    return low, seconds, runs


def virtual(name: str, options: dict, args: argparse.Namespace, length: str) -> dict | None:
    """Every method on one regime judged by the model, a full-length run `length` long (None: a "10s" run under two
    probes' queries at the regime's peak)."""
    cfg = sim_config(options)
    full = full_protocol(length, args.probe_queries)
    true = max_valid_qps(cfg, full)
    if full.min_duration_ms > 1000 and true * full.min_duration_ms / 1000 < 2 * args.probe_queries:
        return None
    offline = offline_virtual(cfg)
    model = judge(cfg, protocol(args.probe_queries), full)
    settings = SearchSettings(precision=WITHIN, probe_queries=args.probe_queries, probe_duration_ms=1000)
    methods = {}
    for method, refine in (("podium", False), ("podium refine_up", True)):
        result = search(model, offline, settings.model_copy(update={"refine_up": refine}))
        confirms = sum(p.stage == "confirm" for p in result.trace)
        methods[method] = outcome(result.qps, true, result.run_seconds, result.runs, result.confirmed, confirms)
        if result.qps:   # an independent full-length run at the answer, and one at 1.04x it
            methods[method] |= {"valid_full": bool(valid_at(cfg, full, result.qps)),
                                "invalid_at_1_04": not bool(valid_at(cfg, full, result.qps * 1.04)),
                                "in_full_runs": round(result.run_seconds / full_run_seconds(model, result.trace,
                                                                                              result.qps), 2)}
    qps, seconds, runs = offline, 0.0, 0
    while True:
        probe = model(qps, "confirm")
        seconds, runs = seconds + probe.duration_s, runs + 1
        if probe.valid or qps < offline * 0.2:
            break
        qps = float(f"{qps - 0.015 * offline:.4g}")
    methods["linear"] = outcome(qps, true, seconds, runs, probe.valid)
    methods["linear"]["in_full_runs"] = round(seconds / probe.duration_s, 2)
    found, seconds, runs = findpeak_virtual(cfg, 0.5 * offline, full)
    methods["findpeak"] = outcome(found, true, seconds, runs, model(found, "confirm").valid)
    return {"config": name, "full_length": length, "capacity": round(cfg.capacity(TOKENS), 2),
            "offline": round(offline, 3), "true_max": round(true, 3), "methods": methods}


# ---------------------------------------------------------------- live: real loadgen, real HTTP server

def live_once(name: str, options: dict, args: argparse.Namespace, work: Path, data: Path) -> dict:
    cfg = sim_config(options)
    true = max_valid_qps(cfg, protocol(args.full_queries))
    port = free_port()
    argv = [sys.executable, "-m", "tasks.engines.simulated.server", "--port", str(port),
            "--chunk-tokens", str(options["chunk_tokens"])]
    argv += [a for k, v in vars(cfg).items() for a in ("--" + k.replace("_", "-"), str(v))]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)  # noqa: S603
    try:
        time.sleep(1.5)
        endpoint = Endpoint(base_url=f"http://127.0.0.1:{port}", model=MODEL_NAME, accepts_token_ids=True,
                            returns_token_ids=True)
        offline_spec = spec(data, "Offline", [(f"{M}.Offline.target_qps", f"{1.2 * cfg.capacity(TOKENS):g}"),
                                              (f"{M}.Offline.min_duration", str(1000 * OFFLINE_S)),
                                              (f"{M}.*.performance_sample_count_override", str(SAMPLES))])
        offline = run_probe(offline_spec, "offline", target_qps(offline_spec), endpoint, work / "offline").completed_qps
        base = server_spec(data, offline, args.full_queries)

        def run(s: RunSpec, stage: str, qps: float, engine: object, folder: str) -> object:
            return run_probe(s, stage, qps, endpoint, Path(folder))

        settings = SearchSettings(precision=WITHIN, probe_queries=args.probe_queries, probe_duration_ms=1000)
        prober = Prober(base, settings, ProbeCache(work / "cache", base), None, str(work / "podium"), run)
        result = search(prober, offline, settings)
        methods = {"podium": outcome(result.qps, true, result.run_seconds, result.runs, result.confirmed)}
        qps, seconds, runs = offline, 0.0, 0
        while True:
            probe = run_probe(with_rate(base, qps, min_duration_ms=None, min_query_count=None), "confirm", qps,
                              endpoint, work / "linear")
            seconds, runs = seconds + probe.duration_s, runs + 1
            if probe.valid or qps < offline * 0.2:
                break
            qps = float(f"{qps - 0.015 * offline:.4g}")
        methods["linear"] = outcome(qps, true, seconds, runs, probe.valid)
        methods["findpeak"] = findpeak_live(server_spec(data, float(f"{0.5 * offline:.4g}"), args.full_queries),
                                            endpoint, work / "findpeak", true)
        return {"config": name, "offline": round(offline, 3), "true_max": round(true, 3), "methods": methods}
    finally:
        server.terminate()
        server.wait(timeout=30)


def findpeak_live(s: RunSpec, endpoint: Endpoint, folder: Path, true: float) -> dict:
    import dataclasses

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text(s.model_dump_json())
    (folder / "endpoint.json").write_text(json.dumps(dataclasses.asdict(endpoint) | {"drop_fields": []}))
    (folder / "findpeak.json").write_text(json.dumps({"server_find_peak_qps_decimals_of_precision": 0,
                                                      "server_find_peak_qps_boundary_step_size": 1.0}))
    began = time.monotonic()
    subprocess.run([sys.executable, str(Path(__file__).with_name("findpeak.py")), str(folder)], cwd=folder,  # noqa: S603
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, timeout=3600)
    seconds = time.monotonic() - began
    steps = parse_steps(folder / "mlperf_log_detail.txt")
    return outcome(steps["found"], true, seconds, steps["runs"], load_run(folder).valid) | {"tried": steps["tried"]}


def median(runs: list[dict]) -> dict:
    out = {"config": runs[0]["config"], "true_max": runs[0]["true_max"],
           "offline": statistics.median(r["offline"] for r in runs), "reps": len(runs), "methods": {}}
    for method in runs[0]["methods"]:
        rows = [r["methods"][method] for r in runs]
        answers = [r["answer"] for r in rows if r["answer"] is not None]
        out["methods"][method] = {
            "answer": statistics.median(answers) if answers else None,
            "error": statistics.median(r["error"] for r in rows if r["error"] is not None) if answers else None,
            "seconds": statistics.median(r["seconds"] for r in rows),
            "runs": statistics.median(r["runs"] for r in rows),
            "within_2pct": sum(r["within_2pct"] for r in rows), "valid": sum(bool(r["valid"]) for r in rows)}
    return out


def table(results: list[dict], kind: str) -> str:
    lines = [f"| {kind} | config | full run | peak (q/s) | method | runs | full-length runs | load seconds | "
             "in full runs | answer (q/s) | answer / peak | within 2 % | VALID | INVALID at 1.04x |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        length = r.get("full_length") or f"{r.get('full_queries', '-')}"
        for method, m in r["methods"].items():
            reps = r.get("reps")
            within = f"{m['within_2pct']}/{reps}" if reps else ("yes" if m["within_2pct"] else "no")
            valid = f"{m['valid']}/{reps}" if reps else ("yes" if m["valid"] else "no")
            answer = "-" if m["answer"] is None else f"{m['answer']:.4g}"
            ratio = "-" if m["error"] is None else f"{1 + m['error']:.3f}"
            over = {True: "yes", False: "no"}.get(m.get("invalid_at_1_04"), "-")
            lines.append(f"| {kind} | {r['config']} | {length} | {r['true_max']:.4g} | {method} "
                         f"| {m['runs']:g} | {m.get('full_runs', '-')} | "
                         f"{m['seconds']:.0f} | {m.get('in_full_runs', '-')} | {answer} | {ratio} | {within} | {valid} "
                         f"| {over} |")
    return "\n".join(lines)


def summary(results: list[dict], method: str = "podium") -> str:
    """One line: in how many regimes `method`'s answer was within 2 % of the peak, passed a full-length run and
    failed at 1.04x, with at most two full-length runs and four full-length runs' time; its answer / peak."""
    rows = [r["methods"][method] for r in results]
    done = [m for m in rows if m["within_2pct"] and m.get("valid_full") and m.get("invalid_at_1_04")
            and m["full_runs"] <= 2 and (m.get("in_full_runs") or 0) <= 4]
    ratios = sorted(1 + m["error"] for m in rows if m["error"] is not None)
    return (f"{method}: {len(done)}/{len(rows)} regimes within 2 % of the peak, VALID at full length and INVALID at "
            f"1.04x, with <= 2 full-length runs and <= 4 full-length runs' time; answer / peak "
            f"{ratios[0]:.3f}-{ratios[-1]:.3f} (median {statistics.median(ratios):.3f}); "
            f"full-length runs {max(m['full_runs'] for m in rows)} at most, in full runs "
            f"{max(m.get('in_full_runs') or 0 for m in rows):g} at most")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("live", "virtual", "both"), default="both")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--configs", default=",".join(CONFIGS), help="virtual: these; live: the first")
    parser.add_argument("--probe-queries", type=int, default=640)
    parser.add_argument("--full-queries", type=int, default=2048, help="a full-length run (live)")
    parser.add_argument("--virtual-full", default="2048,6400,10s",
                        help="full-length runs the virtual mode compares at: queries (6400: 10x a 640-query probe) "
                             "or seconds (10s: a plan's min_duration)")
    parser.add_argument("--merge", action="store_true", help="keep the other mode's results already in --out")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results") / "search.json")
    args = parser.parse_args()
    names = [n for n in args.configs.split(",") if n]
    report: dict = json.loads(args.out.read_text()) if args.merge and args.out.is_file() else {}
    report |= {"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": platform.platform(),
                    "cpus": len(__import__("os").sched_getaffinity(0)), "probe_queries": args.probe_queries,
                    "full_queries": args.full_queries, "configs": {n: CONFIGS[n] for n in names},
                    "load_average_at_start": round(__import__("os").getloadavg()[0], 2)}
    if args.mode in ("virtual", "both"):
        lengths = [x for x in args.virtual_full.split(",") if x]
        rows = [virtual(n, CONFIGS[n], args, length) for length in lengths for n in names]
        report["virtual"] = [r for r in rows if r is not None]
        report["virtual_summary"] = summary(report["virtual"])
        print(table(report["virtual"], "virtual"))
        print(report["virtual_summary"])
    if args.mode in ("live", "both"):
        with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
            data = dataset(Path(tmp))
            runs = [live_once(names[0], CONFIGS[names[0]], args, Path(tmp) / f"rep{i}", data)
                    for i in range(args.reps)]
        report["live_runs"] = runs
        report["live"] = [median(runs) | {"full_queries": args.full_queries}]
        print(table(report["live"], "live"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
