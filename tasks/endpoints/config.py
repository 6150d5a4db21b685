"""The endpoints client's YAML config for one run of the plan (`inference-endpoint benchmark from-config -c ...`).

    client_config(spec, endpoint, run_dir, tokenizer)   # a dict; write_config() puts it in the run folder

What it holds, and where each value comes from (the client's source is mlcommons/endpoints at the commit the round's
rules pin, `endpoints_client` in submission/rules/<round>.yaml; paths below are under its src/inference_endpoint/):
- `type` offline (Offline) or online (Server, Interactive): the official v6.1 checker reads the scenario from
  config.yaml's `type` alone (submission_checker/constants.py ENDPOINTS_YAML_FIELD_MAP `effective_scenario`), so a
  `type: submission` config (whose scenario is in `benchmark_mode`) is rejected there as "Scenario: submission";
  `submission_ref` naming the client's own ruleset of the round (`mlperf-inference-v6.1`:
  config/ruleset_registry.py `_auto_register_mlcommons`, config/rulesets/mlcommons/rules.py `_v6_1`), with which
  the client pins the scheduler and dataloader seeds (and reseeds warmup) from that ruleset whatever the type
  (config/schema.py `_apply_ruleset_seed_overrides`); Podium writes the same seeds from its rules data (`seeds:`),
  so config.yaml says them either way. The examples' seed 42 is not the round's.
- load pattern: Offline `max_throughput` (its target_qps sizes the issued count: config/runtime_settings.py
  `total_samples_to_issue`, target_qps x min duration x 1.1, rounded up to whole data sets), Server and Interactive
  `poisson` at the plan's target_qps; `min_duration_ms` as the run's user.conf lines carry it, else the rules'.
- data sets by the client's own names (dataset_manager/predefined/shopify_product_catalogue/__init__.py): Offline and
  Server `shopify_product_catalogue::q3vl`, Interactive `shopify_product_catalogue_8k::q3vl`. The client has no
  performance sample count: it draws from every row of its data set (runtime_settings.py `n_samples_from_dataset`),
  so Interactive's 8000 (multimodal/qwen3-vl/README.md, v6.1 "Constraints", Interactive scenario: "Performance
  sample count: `8000`") is the 8k set's size, checked when the data set is placed (tasks.endpoints.dataset).
- accuracy: the same data set with `accuracy_config` `shopify_category_f1` on `ground_truth_category`.
- the staged model's tokenizer by local path: a folder is probed on disk, never on the hub
  (commands/benchmark/execute.py `_check_tokenizer_exists`); the run's environment turns the hub off as well.
- streaming on (TTFT is measured only when streamed); sampling: the reference's values (submission/rules/
  generation.yaml, the one place Podium's loadgen requests read too), less the fields the engine refuses.
- the client's worker processes: the plan's `harness_workers`; its connections: the plan's `max_concurrency`.
- the engine's URL and model name, the report folder inside the run folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from submission.base.errors import PlanError
from submission.results.runs import CLIENT_REPORT as REPORT
from submission.results.runs import RunSpec
from submission.rules import Rules, load_rules
from submission.rules.generation import reference_generation
from tasks import clock
from tasks.engines import Endpoint

CONFIG = "endpoints.yaml"
# Rules data set name -> (the client's predefined data set, its split key): the cache file the client reads is
# dataset_cache/<id>/<split>/<id>_<split>.parquet under its working folder (shopify_product_catalogue/__init__.py
# `generate`: DEFAULT_SPLITS train+test, and train only for the 8k set).
CLIENT_DATASETS = {"Shopify/product-catalogue": ("shopify_product_catalogue", "train+test"),
                   "nvidia/Shopify-product-catalogue-8k": ("shopify_product_catalogue_8k", "train")}
PRESET = "q3vl"          # the Qwen3-VL request format (shopify_product_catalogue/presets.py `q3vl`)
ACCURACY = {"eval_method": "shopify_category_f1", "ground_truth": "ground_truth_category",
            "extractor": "identity_extractor", "num_repeats": 1}   # examples/08_Qwen3-VL-235B-A22B_Example
# Sampling fields the client's ModelParams can carry (config/schema.py ModelParams); min_p is not one of them.
SAMPLING = ("temperature", "top_p", "top_k", "repetition_penalty", "presence_penalty", "frequency_penalty")
# The client's `--mode` of a run. A scenario's run with accuracy (`RunSpec.with_accuracy`) is `both`: the client runs
# the performance phase, then issues the accuracy set at the same load pattern, and its one report holds both results
# (the v6.1 Qwen3-VL README: the example configs include the accuracy test, "You do not need a separate accuracy-mode
# run"; the checker's endpoints layout is that one report). A run of mode `accuracy` (an accuracy part measured again
# alone, docs/benchmarks.md) is `both` too: the client's accuracy-only `acc` runs one worker and one connection
# (execute.py `setup_benchmark`), hours for 48289 samples. A search probe is `perf`.
def client_mode(spec: RunSpec) -> str:
    return "both" if with_accuracy(spec) else "perf"


def with_accuracy(spec: RunSpec) -> bool:
    """Whether the client runs the accuracy set in this run (its report then holds an accuracy result)."""
    return spec.with_accuracy or spec.mode == "accuracy"
# The client's start-up limits (config/schema.py Settings.service_ready_timeout_s, endpoint_client/config.py
# worker_initialization_timeout: its defaults), in real seconds: its service and worker processes import the client
# and load the tokenizer, which no accelerated clock speeds up (tasks.clock.real).
SERVICE_READY_S, WORKER_INIT_S = 30.0, 60.0


def client_dataset(spec: RunSpec) -> tuple[str, str, int]:
    """The client's data set id and split for the run's scenario, and the row count the rules give it."""
    bench = load_rules(spec.round).benchmark(spec.benchmark)
    rules_set = bench.scenarios[spec.scenario].dataset or bench.dataset
    if rules_set.name not in CLIENT_DATASETS:
        raise PlanError(f"{spec.benchmark} ({rules_set.name}) has no data set the endpoints client knows",
                        fix=f"measure it with loadgen; the client's Qwen3-VL sets are {', '.join(CLIENT_DATASETS)}")
    return (*CLIENT_DATASETS[rules_set.name], rules_set.size)


def _conf(spec: RunSpec, name: str) -> str | None:
    """The value of the run's user.conf line `<model>.<scenario>.<name>` (any model and scenario)."""
    return next((v for k, v in spec.user_conf if k.rsplit(".", 1)[-1] == name), None)


def sampling(spec: RunSpec, endpoint: Endpoint) -> dict[str, float | int]:
    fields = reference_generation(spec.benchmark, spec.mode).merged(
        max_tokens=spec.max_tokens, temperature=spec.temperature).request_fields()
    return {k: v for k, v in fields.items() if k in SAMPLING and k not in endpoint.drop_fields}


def min_duration_ms(spec: RunSpec, rules: Rules) -> int:
    """The run's minimum duration: its user.conf line where it has one (a smoke run, a search probe), else the
    round's."""
    duration = _conf(spec, "min_duration")
    return int(duration) if duration is not None else rules.min_duration_ms


def smoke_latency_ms(spec: RunSpec) -> float | None:
    """A smoke run's relaxed p99 latency bound (its `target_latency` line, from the plan's `latency_ms`)."""
    value = _conf(spec, "target_latency")
    return float(value) if value is not None and spec.profile == "smoke" else None


def samples_to_issue(spec: RunSpec) -> dict[str, int]:
    """A search probe's exact sample count (`n_samples_to_issue`, from its min_query_count line): without it the client
    rounds its count up to whole data sets (submission/budget/run_length.py), 48289 samples for a Qwen3-VL probe."""
    count = _conf(spec, "min_query_count")
    return {} if count is None else {"n_samples_to_issue": int(count)}


def client_config(spec: RunSpec, endpoint: Endpoint, run_dir: Path, tokenizer: Path,
                  speed: float | None = None) -> dict[str, Any]:
    """The client's config for `spec` against `endpoint`, its report in `run_dir`/report (see the module's doc);
    `speed`: the accelerated clock the client runs on (tasks.clock.ladder), None: the one PODIUM_CLOCK asks for."""
    factor = speed or clock.speed()
    rules = load_rules(spec.round)
    online = spec.loadgen_scenario == "Server"
    target_qps = _conf(spec, "target_qps")
    if online and target_qps is None:
        raise PlanError(f"{spec.label}: a {spec.scenario} run needs a target_qps for the client's poisson load",
                        fix=f"set benchmarks[{spec.benchmark}].scenarios.{spec.scenario}.target_qps, e.g. 40")
    dataset_id, _, _ = client_dataset(spec)
    name = f"{dataset_id}::{PRESET}"
    datasets: list[dict[str, Any]] = [{"name": name, "type": "performance"}]
    if with_accuracy(spec):
        datasets.append({"name": name, "type": "accuracy", "accuracy_config": dict(ACCURACY)})
    load = {"type": "poisson" if online else "max_throughput"}
    if target_qps is not None:
        load["target_qps"] = float(target_qps)
    return {
        "name": f"podium-{spec.key()}",
        "type": "online" if online else "offline",
        "submission_ref": {"model": spec.benchmark, "ruleset": f"mlperf-inference-{spec.round}"},
        "model_params": {"name": endpoint.model, "tokenizer_name": str(tokenizer), "streaming": "on",
                         "max_new_tokens": spec.max_tokens, **sampling(spec, endpoint)},
        "datasets": datasets,
        "settings": {
            "runtime": {"min_duration_ms": min_duration_ms(spec, rules), **samples_to_issue(spec),
                        "scheduler_random_seed": rules.seeds.schedule_rng_seed,
                        "dataloader_random_seed": rules.seeds.sample_index_rng_seed},
            "load_pattern": load,
            "client": {"num_workers": spec.harness_workers, "max_connections": spec.max_concurrency,
                       "worker_initialization_timeout": clock.real(WORKER_INIT_S, factor)},
            # The client waits 240 s by default for the answers still out when a performance phase has issued its
            # last sample, then reports the run complete without them: an Offline phase issues every sample at once,
            # so any Offline run longer than that would lose its tail. Every sample is waited for, as in accuracy.
            "drain": {"performance_timeout_s": None},
            "service_ready_timeout_s": clock.real(SERVICE_READY_S, factor),
        },
        "endpoint_config": {"endpoints": [endpoint.base_url]},
        "report_dir": str(run_dir / REPORT),
    }


def write_config(config: dict[str, Any], run_dir: Path) -> Path:
    path = run_dir / CONFIG
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
