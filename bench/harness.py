"""The harness client against its peers, in output tokens per client CPU-second, side by side (`make bench-harness`).

Every client streams from the instant server (`bench/instant.py`, its own process) at the same settings: prompts of
32 tokens, `--tokens` output tokens per request, `--concurrency` requests in flight. A client's CPU is the user+sys
time of its process and all of its children (resource.getrusage(RUSAGE_CHILDREN) around the run), and what is
compared is the *marginal* cost: each client runs a small and a large request count, and

    tokens per CPU-second = (tokens_large - tokens_small) / (cpu_large - cpu_small)

so interpreter start-up, imports, tokenizer loading and reports (8 to 10 CPU-seconds for `vllm bench serve` and
aiperf here) cancel out and what is left is the cost of streaming. The clients take turns
within each repetition and the figures are medians over `--reps`; each repetition's ratios are taken inside it.

    python bench/harness.py [--reps 3] [--quick]     # writes bench/results/harness.json

Clients: podium (`tasks.harness.client.CompletionClient` on uvloop), `vllm bench serve` (.venv-vllm, through
bench/vllm_bench_serve.py) and aiperf (.venv-aiperf); the peers are skipped, and said so, where their venv is absent.
Also measured, podium only: requests per CPU-second at one output token, and the time from the server's write of
a stream's first token to the client's first-token callback (paced server, moderate load).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
AIPERF = ROOT / ".venv-aiperf" / "bin" / "aiperf"
PROMPT = 32


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def instant_server(mode: str, tick_ms: float = 1.0, first_byte_log: Path | None = None) -> Iterator[str]:
    port = free_port()
    argv = [PY, str(ROOT / "bench" / "instant.py"), "--port", str(port), "--mode", mode, "--tick-ms", str(tick_ms)]
    if first_byte_log is not None:
        argv += ["--first-byte-log", str(first_byte_log)]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)  # noqa: S603
    try:
        server.stdout.readline()   # the "listening" line
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def measured(argv: list[str], timeout_s: float = 600) -> tuple[float, float, str]:
    """Run a client to completion; its CPU (user+sys of it and its children), wall time and stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)  # noqa: S603
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:3]} exited {done.returncode}: {(done.stderr or done.stdout)[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, done.stdout


# --- the clients, each: (url, requests, tokens, concurrency, workdir) -> tokens streamed ---

def podium(url: str, n: int, tokens: int, concurrency: int, work: Path) -> tuple[float, float, int]:
    cpu, wall, out = measured([PY, str(Path(__file__)), "podium-client", url, str(n), str(tokens), str(concurrency)])
    result = json.loads(out.strip().splitlines()[-1])
    if result["errors"]:
        raise RuntimeError(f"podium client: {result['errors']} failed requests")
    return cpu, wall, result["tokens"]


def vllm(url: str, n: int, tokens: int, concurrency: int, work: Path) -> tuple[float, float, int]:
    out = work / f"vllm-{n}-{time.monotonic_ns()}"
    cpu, wall, _ = measured([str(VLLM_PY), str(ROOT / "bench" / "vllm_bench_serve.py"), "--backend", "vllm",
                             "--base-url", url, "--endpoint", "/v1/completions", "--model", "instant",
                             "--tokenizer", str(work / "tiny-llama"), "--dataset-name", "random",
                             "--random-input-len", str(PROMPT), "--random-output-len", str(tokens),
                             "--num-prompts", str(n), "--max-concurrency", str(concurrency), "--ignore-eos",
                             "--disable-tqdm", "--num-warmups", "0", "--save-result", "--result-dir", str(out)])
    result = json.loads(next(out.glob("*.json")).read_text())
    if result["failed"]:
        raise RuntimeError(f"vllm bench serve: {result['failed']} failed requests")
    return cpu, wall, n * tokens   # the server sent exactly that; vLLM re-counts by tokenizing the text


def aiperf(url: str, n: int, tokens: int, concurrency: int, work: Path) -> tuple[float, float, int]:
    out = work / f"aiperf-{n}-{time.monotonic_ns()}"
    cpu, wall, _ = measured([str(AIPERF), "profile", "--model", "instant", "--tokenizer", str(work / "tiny-llama"),
                             "--url", url, "--endpoint-type", "completions", "--streaming",
                             "--synthetic-input-tokens-mean", str(PROMPT), "--synthetic-input-tokens-stddev", "0",
                             "--output-tokens-mean", str(tokens), "--output-tokens-stddev", "0",
                             "--extra-inputs", "ignore_eos:true", "--concurrency", str(concurrency),
                             "--request-count", str(n), "--random-seed", "100", "--ui", "none",
                             "--artifact-dir", str(out)])
    result = json.loads((out / "profile_export_aiperf.json").read_text())
    errors = (result.get("error_request_count") or {}).get("avg") or 0
    if errors:
        raise RuntimeError(f"aiperf: {errors} failed requests")
    return cpu, wall, n * tokens


CLIENTS = {"podium": podium, "vllm bench serve": vllm, "aiperf": aiperf}


def marginal(client: str, url: str, sizes: tuple[int, int], tokens: int, concurrency: int, work: Path) -> dict:
    small = CLIENTS[client](url, sizes[0], tokens, concurrency, work)
    large = CLIENTS[client](url, sizes[1], tokens, concurrency, work)
    d_cpu, d_tokens = large[0] - small[0], large[2] - small[2]
    return {"small": {"cpu_s": round(small[0], 3), "wall_s": round(small[1], 3), "tokens": small[2]},
            "large": {"cpu_s": round(large[0], 3), "wall_s": round(large[1], 3), "tokens": large[2]},
            "tokens_per_cpu_s": round(d_tokens / d_cpu) if d_cpu > 0 else None,
            "requests_per_cpu_s": round((sizes[1] - sizes[0]) / d_cpu) if d_cpu > 0 else None}


# --- podium's client, run as a child so its CPU is measured the same way as the peers' ---

def podium_client(url: str, n: int, tokens: int, concurrency: int, ttft_out: str | None = None) -> None:
    sys.path.insert(0, str(ROOT))
    from tasks.engines import Endpoint
    from tasks.harness.client import CompletionClient
    from tasks.harness.sut import new_event_loop

    client = CompletionClient(Endpoint(url, "instant", accepts_token_ids=True, returns_token_ids=True),
                              max_tokens=tokens, temperature=0.0, max_concurrency=concurrency)
    bodies = [client.encode("/v1/completions", {"prompt": [1 + (i + k) % 500 for k in range(PROMPT)],
                                                "max_tokens": tokens, "temperature": 0.0, "user": f"r{i}"})
              for i in range(n)]
    firsts: dict[str, int] = {}

    async def one(i: int) -> tuple[int, bool]:
        def first(_ids: list[int]) -> None:
            firsts[f"r{i}"] = time.monotonic_ns()

        c = await client.send_bytes(bodies[i], first)
        return len(c.tokens), c.error is None

    async def run() -> list[tuple[int, bool]]:
        try:
            return await asyncio.gather(*[one(i) for i in range(n)])
        finally:
            await client.aclose()

    loop = new_event_loop()
    started = time.monotonic()
    results = loop.run_until_complete(run())
    loop.close()
    if ttft_out:
        Path(ttft_out).write_text(json.dumps(firsts))
    print(json.dumps({"tokens": sum(t for t, _ in results), "errors": sum(not ok for _, ok in results),
                      "wall_s": round(time.monotonic() - started, 3)}))


def added_ttft(concurrency: int, tokens: int, n: int, work: Path) -> dict:
    """Client first-token time minus the server's first-token write time, per request (paced server, 1 ms ticks)."""
    server_log, client_log = work / "first-byte-server.json", work / "first-byte-client.json"
    with instant_server("paced", 1.0, server_log) as url:
        measured([PY, str(Path(__file__)), "podium-client", url, str(n), str(tokens), str(concurrency),
                  str(client_log)])
    server, client = json.loads(server_log.read_text()), json.loads(client_log.read_text())
    delays = sorted((client[k] - server[k]) / 1e6 for k in server if k in client)
    return {"requests": len(delays), "concurrency": concurrency, "tokens_per_request": tokens,
            "p50_ms": round(delays[len(delays) // 2], 3), "p99_ms": round(delays[int(len(delays) * 0.99)], 3),
            "max_ms": round(delays[-1], 3)}


def through_loadgen(url: str, workers: int, tokens: int, concurrency: int, work: Path, samples: int = 0,
                    server_qps: int = 0) -> dict:
    """One Offline performance run of the whole harness (runner child, loadgen, SUT; `workers` client processes)
    over the smoke data set, `samples` samples in its one query: loadgen's own output tokens per second (from the
    first query to the last answer, so process and worker start-up are not in it) and the client CPU (runner and
    workers, start-up included)."""
    sys.path.insert(0, str(ROOT))
    from submission.results.logs import load_run
    from submission.results.runs import RunSpec
    from tasks.engines import Endpoint
    from tasks.harness import runner

    bench = "gpt-oss-120b"
    if server_qps:   # a Server run at that rate for 5 s
        conf = ((f"{bench}.Server.target_qps", str(server_qps)), (f"{bench}.Server.min_duration", "5000"),
                (f"{bench}.*.performance_sample_count_override", "64"))
    else:
        conf = ((f"{bench}.Offline.target_qps", str(samples)), (f"{bench}.Offline.min_duration", "909"),
                (f"{bench}.*.performance_sample_count_override", "64"))   # 1.1 x samples x 0.909 s: `samples`
    scenario = "Server" if server_qps else "Offline"
    spec = RunSpec(plan="bench", profile="smoke", round="v6.1", system="cpu", benchmark=bench, scenario=scenario,
                   mode="performance", loadgen_model=bench, loadgen_scenario=scenario, user_conf=conf,
                   dataset=str(work / "smoke" / "perf_eval_ref.parquet"), dataset_sha256="-", model_sha256="-",
                   engine="instant", max_tokens=tokens, temperature=0.0, max_concurrency=concurrency,
                   harness_workers=workers)
    endpoint = Endpoint(url, "instant", accepts_token_ids=True, returns_token_ids=True)
    run_dir = work / f"loadgen-{workers}-{time.monotonic_ns()}"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    stats = runner.run(spec, endpoint, run_dir, timeout_s=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if stats["failed"]:
        raise RuntimeError(f"harness with {workers} workers: {stats['failed']} failed requests: {stats['errors']}")
    run = load_run(run_dir)
    return {"samples": stats["completed"], "tokens": stats["output_tokens"], "wall_s": stats["wall_s"],
            "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 3),
            "loadgen_tokens_per_s": round(run.tokens_per_second or run.completed_tokens_per_second or 0),
            "ttft_ms": {p: round(run.ttft_ns[p] / 1e6, 3) for p in ("50.00", "99.00") if p in run.ttft_ns}}


def worker_scaling(reps: int, tokens: int, concurrency: int, work: Path, quick: bool) -> dict:
    """The whole harness with 1, 2 and 4 client worker processes against the burst server, taking turns. Each
    count runs a small and a large query: tokens per CPU-second is the marginal cost between them (start-up and
    imports cancel out), tokens per second is loadgen's own figure for the large one."""
    counts = ("1", "2", "4")
    sizes = (500, 2000) if quick else (2000, 12000)
    runs = []
    for rep in range(reps):
        with instant_server("burst") as url:
            row = {}
            for w in counts[rep % len(counts):] + counts[:rep % len(counts)]:
                small, large = (through_loadgen(url, int(w), tokens, concurrency, work, n) for n in sizes)
                row[w] = {"small": small, "large": large, "tokens_per_s": large["loadgen_tokens_per_s"],
                          "tokens_per_cpu_s": round((large["tokens"] - small["tokens"]) /
                                                    (large["cpu_s"] - small["cpu_s"]))}
        print("workers", rep, {w: (r["tokens_per_s"], r["tokens_per_cpu_s"]) for w, r in row.items()}, flush=True)
        runs.append(row)
    median = {w: {"tokens_per_s": statistics.median(r[w]["tokens_per_s"] for r in runs),
                  "tokens_per_cpu_s": statistics.median(r[w]["tokens_per_cpu_s"] for r in runs)} for w in counts}
    speedup = {w: round(statistics.median(r[w]["tokens_per_s"] / r["1"]["tokens_per_s"] for r in runs), 2)
               for w in counts}
    ttft = []   # the extra hop (worker -> pipe -> loadgen process) on the first token, through loadgen's own TTFT
    for rep in range(reps):
        with instant_server("paced", 1.0) as url:
            ttft.append({w: through_loadgen(url, int(w), 64, 32, work, server_qps=200)["ttft_ms"]
                         for w in (("1", "2") if rep % 2 == 0 else ("2", "1"))})
    ttft_median = {w: {p: statistics.median(t[w][p] for t in ttft) for p in ("50.00", "99.00")} for w in ("1", "2")}
    return {"samples_small_large": sizes, "median": median, "median_speedup_over_one": speedup, "runs": runs,
            "server_ttft_ms_median": ttft_median, "server_ttft_runs": ttft}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="small sizes, one repetition: a check that it runs")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "harness.json")
    args = parser.parse_args()
    reps = 1 if args.quick else args.reps
    sizes = (100, 400) if args.quick else (200, 1200)
    clients = ["podium"] + [c for c, path in (("vllm bench serve", VLLM_PY), ("aiperf", AIPERF)) if path.exists()]
    skipped = sorted(set(CLIENTS) - set(clients))
    results: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "cpus": os.cpu_count(),
                     "load_average_at_start": os.getloadavg()[0], "settings": {
                         "prompt_tokens": PROMPT, "output_tokens": args.tokens, "concurrency": args.concurrency,
                         "requests_small_large": sizes, "reps": reps}, "skipped": skipped, "modes": {}}
    with tempfile.TemporaryDirectory(prefix="podium-bench-harness-") as tmp:
        work = Path(tmp)
        from tasks.engines.smoke import data as smoke_data
        from tasks.engines.smoke import model as smoke_model

        smoke_model.build(work / "tiny-llama")   # the peers' tokenizer (they count prompt tokens with it)
        for mode in ("burst", "paced"):
            runs = []
            for rep in range(reps):
                with instant_server(mode, 1.0) as url:
                    order = clients[rep % len(clients):] + clients[:rep % len(clients)]
                    row = {c: marginal(c, url, sizes, args.tokens, args.concurrency, work) for c in order}
                print(mode, rep, {c: r["tokens_per_cpu_s"] for c, r in row.items()}, flush=True)
                runs.append(row)
            summary = {c: statistics.median(r[c]["tokens_per_cpu_s"] for r in runs) for c in clients}
            ratios = {f"podium / {c}": round(statistics.median(r["podium"]["tokens_per_cpu_s"] /
                                                               r[c]["tokens_per_cpu_s"] for r in runs), 2)
                      for c in clients if c != "podium"}
            results["modes"][mode] = {"median_tokens_per_cpu_s": summary, "median_ratios": ratios, "runs": runs}
        one = []
        for _ in range(reps):
            with instant_server("burst") as url:
                one.append(marginal("podium", url, (sizes[0] * 5, sizes[1] * 5), 1, args.concurrency, work))
        results["one_token"] = {"median_requests_per_cpu_s": statistics.median(r["requests_per_cpu_s"] for r in one),
                                "runs": one}
        ttft = [added_ttft(32, 64, 400 if args.quick else 1600, work) for _ in range(reps)]
        smoke_data.build(work / "tiny-llama", work / "smoke")
        results["worker_processes"] = worker_scaling(reps, args.tokens, args.concurrency, work, args.quick)
        results["added_ttft"] = {"median_p50_ms": statistics.median(t["p50_ms"] for t in ttft),
                                 "median_p99_ms": statistics.median(t["p99_ms"] for t in ttft), "runs": ttft}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({k: v for k, v in results.items()
                      if k not in ("modes", "one_token", "added_ttft", "worker_processes")}))
    for mode, data in results["modes"].items():
        print(mode, data["median_tokens_per_cpu_s"], data["median_ratios"])
    print("one token:", results["one_token"]["median_requests_per_cpu_s"], "requests/CPU-s;",
          "added TTFT p50/p99 ms:", results["added_ttft"]["median_p50_ms"], results["added_ttft"]["median_p99_ms"])
    print("through loadgen, by client worker processes:", results["worker_processes"]["median"],
          "speed-up over one:", results["worker_processes"]["median_speedup_over_one"],
          "Server TTFT p50/p99 ms at 200 q/s (paced):", results["worker_processes"]["server_ttft_ms_median"])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "podium-client":
        podium_client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
                      sys.argv[6] if len(sys.argv) > 6 else None)
    else:
        main()
