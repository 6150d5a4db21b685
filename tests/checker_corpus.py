"""A complete v6.1 closed-division submission tree for the checker's tests, built from real loadgen runs.

gpt-oss-120b Offline, Server and Interactive, each with its accuracy run and its TEST07 and TEST09 audit runs,
are real mlcommons-loadgen runs against the fake token-emitting SUT of tests/loadgen_fake.py. They are configured
as a closed submission must be (min_duration 600000 ms, 6396 performance samples, the v6.1 seeds of loadgen's own
mlperf.conf) and run under an accelerated clock (libfaketime, x100), so each 600 s run lasts 600 s on loadgen's
clock and about 6 s on the wall. The verification files and accuracy.txt are computed from those runs' accuracy
logs: the fake SUT's answers are known (`fake_tokens`), so exact match and output lengths are real measurements.
qwen3-vl-235b-a22b Offline and Interactive use the endpoints layout; no loadgen-less harness runs here, so their
config.yaml / result_summary.json / accuracy_results.json are written from the documented schema (reference §1.4).
"""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from submission.results.logs import load_run
from submission.rules import load_rules
from submission.tree.paths import COMPLIANCE_FILES, Tree
from submission.tree.systems import describe
from submission.tree.truncate import truncate_tree
from tests.loadgen_fake import fake_tokens, run_fake

ROUND = "v6.1"
ORG = "Podium"
SYSTEM = "8xH200_2xXeon"
GPT = "gpt-oss-120b"
QWEN = "qwen3-vl-235b-a22b"
CLOCKS = (100, 25, 5)  # faketime speed-ups: 600 s of loadgen time in about 6 s. A run that misses its latency
# limits because a busy machine held the fake SUT back for a few real milliseconds (x100 turns 20 ms into the whole
# 2 s TTFT budget of Interactive) runs again under a slower clock; on a quiet machine every run passes at x100.
PERF_TOKENS = 1278  # tokens per answer in performance runs: TEST09's reference mean output length
ACC_TOKENS = 16  # tokens per answer in accuracy-mode runs (keeps their logs small)
OFFLINE_BATCH_LATENCY_S = 6.1  # 100 batches of 64 samples -> the Offline query lasts 610 s (>= min_duration)
SERVER_QPS = 10  # 6396 queries (one permutation of the performance set) in about 640 s
NICENESS = -5  # the fake SUT's children outrank other work on a shared machine (where the OS allows it)
MODELS = {"Offline": GPT, "Server": GPT, "Interactive": f"{GPT}-interactive"}
LOADGEN_SCENARIO = {"Offline": "Offline", "Server": "Server", "Interactive": "Server"}


def user_conf(scenario: str) -> list[str]:
    """The closed-division user.conf of each scenario: nothing under the round's minimums."""
    model = MODELS[scenario]
    if scenario == "Offline":
        return [f"{model}.Offline.min_query_count = 6396", f"{model}.Offline.target_qps = 1"]
    return [f"{model}.Server.target_qps = {SERVER_QPS}"]


def run(outdir: Path, scenario: str, *, mode: str = "performance", audit: str | None = None,
        tokens: int = PERF_TOKENS, extra_conf: tuple[str, ...] = (), expect_valid: bool = True, **options) -> Path:
    """One real loadgen run under an accelerated clock; a performance run that must be VALID but is not (a loaded
    machine) runs again under a slower clock."""
    rules = load_rules(ROUND)
    model = MODELS[scenario]
    conf = user_conf(scenario) + list(extra_conf)
    total = 6396
    if audit == "TEST07":  # the GPQA compliance set; loadgen 6.0.17 needs the matching psc (reference §4 notes)
        conf.append(f"{model}.*.performance_sample_count_override = 990")
        total = 990
    offline_latency = OFFLINE_BATCH_LATENCY_S if scenario == "Offline" and mode == "performance" and not audit else 0
    kwargs = {"scenario": LOADGEN_SCENARIO[scenario], "mode": mode, "loadgen_model": model, "user_conf_lines": conf,
              "total_count": total, "tokens_per_sample": tokens, "latency_s": offline_latency,
              "audit_config_lines": rules.audit(audit).config_lines(GPT) if audit else None,
              "token_gap_s": 0.0, "niceness": NICENESS} | options
    for speed in CLOCKS:
        if outdir.exists():
            shutil.rmtree(outdir)
        run_fake(outdir, clock_speed=speed, **kwargs)
        (outdir / "clock.txt").write_text(f"faketime x{speed}\n")  # which clock the run needed (diagnostics)
        if mode != "performance" or not expect_valid or load_run(outdir).valid:
            break
    return outdir


def build_runs(base: Path) -> dict[str, Path]:
    """Every loadgen run the corpus and its mutations use, two at a time (the machine has two cores)."""
    jobs: dict[str, tuple[str, dict]] = {}
    for sc in ("Offline", "Server", "Interactive"):
        jobs[f"perf-{sc}"] = (sc, {})
        jobs[f"acc-{sc}"] = (sc, {"mode": "accuracy", "tokens": ACC_TOKENS})
        jobs[f"TEST07-{sc}"] = (sc, {"audit": "TEST07"})
        jobs[f"TEST09-{sc}"] = (sc, {"audit": "TEST09"})
    v60 = load_rules("v6.0").seeds.model_dump()
    jobs["invalid-Offline"] = ("Offline", {"latency_s": 0.0, "expect_valid": False})  # done long before 600 s
    jobs["v6.0-Offline"] = ("Offline", {"seeds": v60})  # what the v6.0 loadgen would log
    jobs["errors-Server"] = ("Server", {"short_every": 1000})  # VALID, but loadgen logged errors
    jobs["short-Offline"] = ("Offline", {"extra_conf": (f"{GPT}.Offline.min_duration = 60000",),
                                         "latency_s": 0.7})  # a VALID 60 s run: under the round's minimum
    order = sorted(jobs, key=lambda name: name.startswith(("acc-", "TEST07")))  # long runs first
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(run, base / name, jobs[name][0], **jobs[name][1]) for name in order}
        return {name: future.result() for name, future in futures.items()}


def score(log: Path) -> tuple[float, float]:
    """Exact match (%) of the fake SUT's answers in an accuracy log against the answers it must give, and the
    mean output length in tokens."""
    entries = json.loads(log.read_text())
    right = sum(bytes.fromhex(e["data"]) == fake_tokens(e["qsl_idx"], len(e["data"]) // 8).tobytes()
                for e in entries)
    return 100.0 * right / len(entries), sum(len(e["data"]) // 8 for e in entries) / len(entries)


def copy(files: tuple[str, ...], src: Path, dst: Path) -> None:
    for name in files:
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / name, dst / name)


PERF = ("mlperf_log_summary.txt", "mlperf_log_detail.txt")


def verify_files(test: str, run_dir: Path) -> dict[str, str]:
    """What run_verification.py would write for the audit run in `run_dir`, computed from its accuracy log."""
    rules = load_rules(ROUND)
    values = rules.audit(test).values(GPT)
    if test == "TEST07":
        exact, _ = score(run_dir / "mlperf_log_accuracy.json")
        threshold = values["test07_accuracy_threshold"]
        verdict = "TEST PASS" if exact >= threshold else "TEST FAIL"
        return {"verify_accuracy.txt": f"exact_match: {exact:.3f}\nthreshold: {threshold}\n{verdict}\n"}
    _, mean = score(run_dir / "mlperf_log_accuracy.json")
    low, high = values["test09_min_output_tokens"], values["test09_max_output_tokens"]
    verdict = "TEST PASS" if low <= mean <= high else "TEST FAIL"
    return {"verify_output_len.txt": f"Mean output tokens: {mean:.2f}\nAllowed range: [{low}, {high}]\n{verdict}\n"}


def system_description() -> dict[str, str]:
    host = {"host_processor_model_name": "Intel(R) Xeon(R) Platinum 8480C", "host_processors_per_node": "2",
            "host_processor_core_count": "56", "host_processor_frequency": "3800 MHz",
            "host_processor_caches": "L1d 48K, L2 2M, L3 105M", "host_memory_capacity": "2.0 TB",
            "host_storage_capacity": "30 TB", "host_storage_type": "NVMe SSD",
            "operating_system": "Ubuntu 24.04", "host_network_card_count": "8", "accelerators_per_node": "8",
            "accelerator_model_name": "NVIDIA H200", "accelerator_memory_capacity": "141 GB",
            "other_software_stack": "CUDA 12.8, NVIDIA driver 570"}
    overrides = {"host_memory_configuration": "32x 64 GB DDR5", "host_networking": "Infiniband",
                 "host_networking_topology": "N/A (single node)", "accelerator_host_interconnect": "PCIe Gen5 x16",
                 "accelerator_interconnect": "NVLink", "accelerator_memory_configuration": "HBM3e",
                 "accelerator_interconnect_topology": "NVSwitch", "accelerator_frequency": "1980 MHz",
                 "accelerator_on-chip_memories": "50 MB L2", "host_processor_interconnect": "UPI"}
    return describe(division="closed", submitter=ORG, system_name="8x H200 (Podium corpus)", status="available",
                    system_type="datacenter", number_of_nodes=1, framework="vLLM 0.31", overrides=overrides,
                    host=host, round=ROUND)


MEASUREMENTS = {"input_data_types": "int32", "retraining": "No", "starting_weights_filename": "openai/gpt-oss-120b",
                "weight_data_types": "mxfp4, bf16", "weight_transformations": "none"}


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def gpt_scenario(tree: Tree, sc: str, runs: dict[str, Path]) -> None:
    base = tree.scenario(SYSTEM, GPT, sc)
    copy(PERF, runs[f"perf-{sc}"], tree.performance(SYSTEM, GPT, sc))
    shutil.copy2(runs[f"perf-{sc}"] / "user.conf", base / "user.conf")
    write(base / "measurements.json", json.dumps(MEASUREMENTS, indent=2) + "\n")
    write(base / "README.md", f"# {GPT} {sc}\n\nReproduce: `podium run plan.yaml` (src/podium/plan.yaml).\n")
    acc = tree.accuracy(SYSTEM, GPT, sc)
    copy((*PERF, "mlperf_log_accuracy.json"), runs[f"acc-{sc}"], acc)
    exact, tokens = score(acc / "mlperf_log_accuracy.json")
    write(acc / "accuracy.txt", f"{{'exact_match': {exact:.3f}, 'tokens_per_sample': {tokens:.1f}}}\n")
    for test in ("TEST07", "TEST09"):
        folder, src = tree.compliance(SYSTEM, GPT, sc, test), runs[f"{test}-{sc}"]
        assert COMPLIANCE_FILES[test].perf_run
        copy(PERF, src, folder / "performance" / "run_1")
        copy(("mlperf_log_accuracy.json",), src, folder / "accuracy")
        for name, text in verify_files(test, src).items():
            write(folder / name, text)


def qwen_scenario(tree: Tree, sc: str) -> None:
    rules = load_rules(ROUND)
    seeds, s = rules.seeds, rules.benchmark(QWEN).scenario(sc)
    online = sc != "Offline"
    config = {"name": f"qwen3_vl_{sc.lower()}", "type": "online" if online else "offline",
              "model_params": {"name": "Qwen/Qwen3-VL-235B-A22B-Instruct", "max_new_tokens": 150,
                               "streaming": "on" if online else "off"},
              "datasets": [{"name": "shopify_product_catalogue_8k::q3vl" if sc == "Interactive" else
                            "shopify_product_catalogue::q3vl", "type": "accuracy",
                            "accuracy_config": {"eval_method": "shopify_category_f1",
                                                "ground_truth": "ground_truth_category"}}],
              "settings": {"runtime": {"min_duration_ms": 600000, "scheduler_random_seed": seeds.schedule_rng_seed,
                                       "dataloader_random_seed": seeds.sample_index_rng_seed},
                           "load_pattern": {"type": "poisson", "target_qps": 3} if online else
                           {"type": "max_throughput"}},
              "endpoint_config": {"endpoints": ["http://localhost:8000"]}}
    write(tree.endpoints_config(SYSTEM, QWEN, sc), yaml.safe_dump(config, sort_keys=False))
    issued, seconds = (1890, 630.0) if online else (48289, 792.3)
    p99_ns = 1_210_000_000 if sc == "Interactive" else 9_800_000_000
    summary = {"n_samples_issued": issued, "n_samples_completed": issued, "n_samples_failed": 0,
               "duration_ns": int(seconds * 1e9), "tps": issued * 42.7 / seconds,
               "latency": {"early_stopping_percentiles": {"99.0": p99_ns}, "percentiles": {"99.0": p99_ns - 10**7}},
               "output_sequence_lengths": {"avg": 42.7}}
    write(tree.endpoints_result_summary(SYSTEM, QWEN, sc), json.dumps(summary, indent=2) + "\n")
    scores = {"accuracy_scores": [{"dataset_type": "accuracy", "total_samples": s.accuracy_sample_count,
                                   "score": {"f1": 0.7911 if sc == "Offline" else 0.7884}}]}
    write(tree.endpoints_accuracy_results(SYSTEM, QWEN, sc), json.dumps(scores, indent=2) + "\n")
    write(tree.measurements(SYSTEM, QWEN, sc), json.dumps(MEASUREMENTS | {
        "starting_weights_filename": "Qwen/Qwen3-VL-235B-A22B-Instruct", "weight_data_types": "fp8"}, indent=2))
    write(tree.readme(SYSTEM, QWEN, sc), f"# {QWEN} {sc}\n\nReproduce: `inference-endpoint benchmark from-config "
          "-c config.yaml` against the engine of src/podium/plan.yaml.\n")


def assemble_corpus(runs: dict[str, Path], root: Path, backup: Path) -> Path:
    """The complete closed tree under `root`; the full accuracy logs are kept under `backup`."""
    tree = Tree(root, "closed", ORG)
    write(tree.system_json(SYSTEM), json.dumps(system_description(), indent=2) + "\n")
    write(tree.src / "podium" / "README.md", "Podium ran this submission: `podium run plan.yaml`.\n")
    for benchmark in (GPT, QWEN):  # each benchmark's code folder, as the tree writer gives it (Tree.code)
        write(tree.code(benchmark) / "README.md", f"# {benchmark}\n\nThe plan: src/podium/plan.yaml.\n")
    write(tree.calibration, "# Calibration\n\nNo calibration: the weights are used as published.\n")
    for sc in ("Offline", "Server", "Interactive"):
        gpt_scenario(tree, sc, runs)
    for sc in ("Offline", "Interactive"):
        qwen_scenario(tree, sc)
    truncate_tree(root, backup, round=ROUND)
    return root
