"""The submission plan: what to run, where, and where the results go. Validated once, at the edge.

A plan names the submitter, the round and division, the systems, the benchmarks (each with its engine, model,
datasets, scenarios and loadgen settings), object storage, and a profile: `submission` holds every value to the
round's rules; `smoke` allows the named, reported deviations that make a CPU run take minutes, never a valid
submission.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, Field, PrivateAttr, ValidationError, field_validator, model_validator

from submission.base.errors import PlanError, did_you_mean
from submission.base.schema import Input, reason
from submission.plan.client_length import offline_runs
from submission.plan.engine_options import OPTIONS as ENGINE_OPTIONS
from submission.plan.engine_options import EngineTelemetry, KubernetesSettings, engine_problems
from submission.plan.fetch import FetchItem, FetchSource, fetch_problems
from submission.plan.fetch import items as fetch_items
from submission.plan.limits import MAX_DEPTH, AnswerTokens, Nodes, Rate, levels
from submission.plan.parts import expand, files
from submission.plan.platforms import DEFAULT as DEFAULT_PLATFORM
from submission.plan.platforms import MODEL_FIELD, PLATFORMS, Platform, platform_of
from submission.plan.replicas import Layout, ReplicasSpec
from submission.plan.replicas import layout as replica_layout
from submission.plan.replicas import problems as replica_problems
from submission.plan.secret_env import shown_plan
from submission.plan.serving import serving_problems
from submission.plan.slurm_options import SlurmSettings
from submission.plan.slurm_options import settings_problems as slurm_problems
from submission.rules import ROUNDS, Harness, load_rules, reference_facts
from submission.rules.generation import guided_decoding_problem, load_generation

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
# The GPU platforms an engine runs on where it is not every one Podium knows: TensorRT-LLM is built for CUDA alone
# (NVIDIA/TensorRT-LLM), and Podium's Dynamo deployments are NVIDIA's (the operator requests `nvidia.com/gpu` for a
# graph's `gpu` limit: ai-dynamo/dynamo deploy/operator, consts.KubeResourceGPUNvidia; its workers here are CUDA
# builds).
ENGINE_PLATFORMS = {"trtllm": ("nvidia",), "dynamo": ("nvidia",)}
SCENARIOS = ("Offline", "Server", "Interactive")


def check_name(value: str) -> str:
    """Names become folder names in the tree: no `/`, no `..`, no spaces."""
    if not NAME.fullmatch(value) or ".." in value:
        raise ValueError(f"{value!r} is not a safe folder name; use letters, digits and . _ + - only (no '/', no '..')")
    return value


SafeName = Annotated[str, AfterValidator(check_name)]


class SystemSpec(Input):
    name: SafeName = Field(description="the system's name in the tree: systems/<name>.json, results/<name>/")
    nodes: Nodes = Field(1, description="the system's nodes (its description's number_of_nodes)")
    status: Literal["available", "preview", "rdi"] = Field("available", description="the system's availability "
                                                           "category in the round")
    system_type: Literal["datacenter", "edge", "datacenter,edge", "edge,datacenter"] = Field(
        "datacenter", description="the round's category the system is submitted in")
    description: dict[str, str] = Field(default_factory=dict,
                                        description="system-description fields that override host detection")
    work_pool: SafeName | None = Field(None, description="the Prefect work pool whose worker runs on this system's "
                                       "cluster: its benchmarks run there as deployment runs (docs/fleet.md); "
                                       "unset: in the process that runs the plan")


class ModelSpec(Input):
    name: SafeName = Field(description="the model actually served; in the open division mapped to the benchmark")
    source: str = Field(description="a folder on a shared filesystem, or s3://bucket/prefix")
    weight_data_types: str = Field("fp32", description="the weights' data types as measurements.json states them "
                                   "(e.g. mxfp4, fp8); the staged checkpoint is checked against it")
    parameters: float | None = Field(None, gt=0, description="total parameter count (e.g. 235e9) for the memory-fit "
                                     "check before the model is staged; default: the benchmark's reference model "
                                     "(submission/rules/models.yaml) when model.name is the benchmark's, else "
                                     "unknown until staged")
    input_data_types: str = Field("int32", description="measurements.json's input_data_types")
    weight_transformations: str = Field("none", description="measurements.json's weight_transformations: how the "
                                        "weights were derived from the reference")
    starting_weights_filename: str = Field("", description="measurements.json's starting_weights_filename; "
                                           "default: model.source")


class EngineSpec(Input):
    """What runs (`name`, typed `options`: see submission/plan/engine_options.py) and where (`launcher` and its
    section)."""

    name: str = Field(description="the engine: trtllm, vllm, sglang, dynamo, external, smoke, smoke-vlm or simulated")
    options: dict[str, Any] = Field(default_factory=dict, description="the engine's typed options, checked when the "
                                    "plan loads: see benchmarks[].engine.options below, per engine")
    launcher: Literal["local", "slurm", "kubernetes"] = Field("local", description="where the engine's processes "
                                                              "run: this host, Slurm job steps, Kubernetes pods")
    _config: Any = PrivateAttr(None)
    _slurm: SlurmSettings | None = PrivateAttr(None)
    kubernetes: KubernetesSettings | None = None
    slurm: dict[str, Any] = Field(default_factory=dict, description="the Slurm launcher's settings")
    ready_timeout_s: float = Field(600, gt=0, description="how long the engine may take to answer a one-token "
                                                          "request (weights load for minutes on GPUs)")
    stall_timeout_s: float = Field(300, gt=0, description="how long the engine may send nothing at all while "
                                                          "requests are in flight before the run ends and the "
                                                          "engine is relaunched (a hung collective keeps its port "
                                                          "open and answers nothing)")
    warmup_requests: int = Field(8, ge=0, le=1024, description="after each launch, before the first measured "
                                 "request: this many requests like the first run's (its data set, sampling settings, "
                                 "images), all at once, so kernels compiled on first use (vLLM's FlashInfer sampler) "
                                 "are compiled untimed; 0: no warm-up")
    warmup_timeout_s: float = Field(600, gt=0, description="how long the warm-up's answers may take before the launch "
                                                           "fails")
    telemetry: EngineTelemetry = Field(default_factory=EngineTelemetry,
                                       description="where each run's GPU telemetry comes from (GPU exporters)")
    replicas: ReplicasSpec | None = Field(None, description="serve the engine as independent replicas, K on each "
                                          "of N nodes, behind the head's dispatch (docs/replicas.md); the options "
                                          "give one replica's parallelism")
    _layout: Layout | None = PrivateAttr(None)
    _platform: str = PrivateAttr(DEFAULT_PLATFORM.name)

    @model_validator(mode="after")
    def _typed(self) -> EngineSpec:
        if self.name not in ENGINE_OPTIONS:
            raise ValueError(f"name: unknown engine {self.name!r}; {did_you_mean(self.name, ENGINE_OPTIONS)}")
        config, problems = engine_problems(self.name, self.options, self.launcher, self.kubernetes)
        problems += slurm_problems(self.slurm, self.launcher)
        if problems:
            raise ValueError("; ".join(problems))
        self._config = config
        self._slurm = SlurmSettings.model_validate(self.slurm) if self.slurm else None
        if self.replicas is not None:
            self._layout = replica_layout(self.replicas, config)   # N resolved against the system by the plan
        return self

    def config(self) -> Any:
        """The typed options (a submission.plan.engine_options model), parsed once, when the plan loaded."""
        return self._config

    def replica_layout(self) -> Layout | None:
        """The replicas resolved against the system (submission/plan/replicas.py); None: one serving instance."""
        return self._layout

    def platform(self) -> Platform:
        """The GPU platform its system's description names (submission/plan/platforms.py), set by the plan when it
        loads: what the launchers pin GPUs with, request them by and sample them with."""
        return PLATFORMS[self._platform]

    def slurm_settings(self) -> SlurmSettings | None:
        """The typed `slurm` section, parsed when the plan loaded (None: not given; the launcher's defaults)."""
        return self._slurm


class DatasetSpec(Input):
    performance: str = Field(description="the performance runs' data set: a file (or a folder holding one), local or "
                             "s3://")
    accuracy: str = Field(description="the accuracy runs' data set, as `performance`")
    scenarios: dict[str, str] = Field(default_factory=dict,
                                      description="a scenario's own data set for its performance and accuracy runs, "
                                                  "where the round gives it one, e.g. Interactive: "
                                                  "/data/shopify_product_catalogue_8k.parquet (Qwen3-VL)")
    lcb_tests: str | None = Field(None, description="gpt-oss-120b, deepseek-r1: the LiveCodeBench tests (JSON lines) "
                                                    "its evaluator runs; staged like the data sets and given to the "
                                                    "evaluator")
    math_grader: str | None = Field(None, description="deepseek-r1: the folder of openai/prm800k at the round's commit "
                                    "(`podium fetch-grader`, or a fetch entry {github: openai/prm800k}), whose "
                                    "PRM800K grader the evaluator runs on MATH-500 answers; staged like the tests")
    compliance: dict[str, str] = Field(default_factory=dict,
                                       description="a compliance test's own data set, e.g. "
                                                   "TEST07: acc/acc_eval_compliance_gpqa.parquet")


class GenerationSpec(Input):
    max_tokens: AnswerTokens = Field(description="performance runs; at least 2 tokens so loadgen can time TPOT")
    accuracy_max_tokens: AnswerTokens | None = Field(None, description="accuracy runs; default: max_tokens")
    temperature: float = Field(0.0, ge=0.0, description="the sampling temperature every request carries (0: "
                               "greedy)")
    guided_decoding: bool = Field(False, description="Qwen3-VL: constrain answers to the answer JSON schema "
                                                     "(response_format), as the reference's use_guided_decoding")


class ScenarioSpec(Input):
    target_qps: Rate | None = Field(None, description="the rate loadgen (or the client) schedules: "
                                     "required for Server and Interactive; for Offline it sizes the one query")
    expected_qps: Rate | None = Field(None, description="the rate the system is expected to sustain (a "
                                       "measurement, the search's answer): an Offline run's pace in the predicted "
                                       "run length, and the plan refuses an endpoints Offline target_qps whose run "
                                       "would end under its min duration at that rate")
    min_duration_ms: int | None = Field(None, ge=0, description="user.conf min_duration; default: "
                                        "loadgen.min_duration_ms, else the round's")
    min_query_count: int | None = Field(None, ge=1, description="user.conf min_query_count; default: "
                                        "loadgen.min_query_count, else the round's")
    latency_ms: float | None = Field(None, gt=0, description="smoke profile, endpoints client only: the p99 latency "
                                     "bound a stand-in model on a shared CPU is judged by, in place of the round's "
                                     "(a named deviation: `latency-limit` in the checker)")
    ttft_ms: float | None = Field(None, gt=0, description="smoke profile, loadgen only: the TTFT p99 bound a stand-in "
                                  "model on a shared CPU is judged by, in place of the round's (user.conf "
                                  "`ttft_latency`; a named deviation: `latency-limit` in the checker)")
    tpot_ms: float | None = Field(None, gt=0, description="smoke profile, loadgen only: the TPOT p99 bound, as "
                                  "`ttft_ms` (user.conf `tpot_latency`)")
    max_concurrency: int = Field(64, ge=1, description="requests the harness keeps on the wire at once; the rest "
                                 "wait, holding no connection")
    harness_workers: int = Field(1, ge=1, le=256, description="client worker processes; each needs a request "
                                 "of its own, so at most max_concurrency")

    def relaxed_limits(self) -> dict[str, float]:
        """A smoke plan's own latency bounds by what they bound (ttft, tpot, latency): its named deviation."""
        return {name: value for name, value in (("ttft", self.ttft_ms), ("tpot", self.tpot_ms),
                                                ("latency", self.latency_ms)) if value is not None}

    @model_validator(mode="after")
    def _workers_within_concurrency(self) -> ScenarioSpec:
        if self.harness_workers > self.max_concurrency:
            raise ValueError(f"harness_workers {self.harness_workers} is over max_concurrency "
                             f"{self.max_concurrency}: lower harness_workers or raise max_concurrency")
        return self


class LoadgenSpec(Input):
    """user.conf values shared by every scenario of a benchmark; a scenario's own values win."""

    min_duration_ms: int | None = Field(None, ge=0, description="user.conf min_duration (under the round's: a "
                                        "smoke profile's named deviation)")
    min_query_count: int | None = Field(None, ge=1, description="user.conf min_query_count")
    performance_sample_count: int | None = Field(None, ge=1, description="user.conf "
                                                 "performance_sample_count_override")
    accuracy_sample_count: int | None = Field(None, ge=1, description="samples of the accuracy runs (under the data "
                                              "set's size: a smoke profile's named deviation)")


class BenchmarkSpec(Input):
    benchmark: str = Field(description="the round's benchmark, e.g. gpt-oss-120b (submission/rules/<round>.yaml)")
    system: str = Field(description="the name of the system in systems[] it runs on")
    engine: EngineSpec = Field(description="what serves the model and where")
    model: ModelSpec = Field(description="the model served and its source")
    dataset: DatasetSpec = Field(description="the data sets the runs read")
    generation: GenerationSpec = Field(description="the generation settings every request carries")
    scenarios: dict[str, ScenarioSpec] = Field(description="the scenarios to measure (Offline, Server, Interactive) "
                                               "and their settings")
    loadgen: LoadgenSpec = Field(LoadgenSpec(), description="user.conf values for every scenario")
    accuracy: bool = Field(True, description="run an accuracy run per scenario")
    evaluator: str | None = Field(None, description="accuracy evaluator; default: the benchmark's reference one")
    harness: Harness | None = Field(None, description="the measuring client: loadgen or endpoints (the MLCommons "
                                                      "endpoints client); default: the round's for the benchmark")
    fetch: dict[str, FetchSource] = Field(default_factory=dict, description="where this benchmark's inputs come "
                                          "from, destination -> source, for `podium fetch PLAN` "
                                          "(submission/plan/fetch.py), e.g. /mnt/mlperf/models/gpt-oss-120b: {repo: "
                                          "openai/gpt-oss-120b}; each destination is the model.source, a data set "
                                          "file, dataset.lcb_tests, dataset.math_grader or a folder holding one")

    @property
    def key(self) -> str:
        return f"{self.system}/{self.benchmark}"

    def engine_variants(self) -> list[tuple[tuple[str, ...], Any]]:
        """The engine launches the scenarios need, in the rules' scenario order: (scenarios, typed options) for each
        distinct variant of the options (`EngineOptions.for_scenario`); one unless the options turn something on for
        some scenarios only (sglang's speculative decoding, Interactive)."""
        out: list[tuple[tuple[str, ...], Any]] = []
        for name in (s for s in SCENARIOS if s in self.scenarios):
            options = self.engine.config().for_scenario(name)
            same = next((i for i, (_, o) in enumerate(out) if o.as_plan() == options.as_plan()), None)
            if same is None:
                out.append(((name,), options))
            else:
                out[same] = ((*out[same][0], name), out[same][1])
        return out

    def sources(self) -> list[tuple[str, str, str]]:
        """Everything a run of this benchmark stages, as (plan field under the benchmark, kind, source): the model
        (kind `models`), then its data sets (kind `datasets`: performance, accuracy, each compliance test's own), then
        the LiveCodeBench tests and the MATH-500 grader (kind `tests`) where the plan names them."""
        return [("model.source", "models", self.model.source),
                ("dataset.performance", "datasets", self.dataset.performance),
                ("dataset.accuracy", "datasets", self.dataset.accuracy),
                *((f"dataset.scenarios.{name}", "datasets", path) for name, path in self.dataset.scenarios.items()),
                *((f"dataset.compliance.{test}", "datasets", path) for test, path in self.dataset.compliance.items()),
                *((("dataset.lcb_tests", "tests", self.dataset.lcb_tests),) if self.dataset.lcb_tests else ()),
                *((("dataset.math_grader", "tests", self.dataset.math_grader),) if self.dataset.math_grader else ())]

    @model_validator(mode="after")
    def _guided_decoding_supported(self) -> BenchmarkSpec:
        if self.generation.guided_decoding:
            problem = guided_decoding_problem(self.benchmark, self.engine.name, self.engine.options)
            if problem:
                raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _within_context(self) -> BenchmarkSpec:
        """No answer is longer than the served model's context, where Podium knows it before staging (the reference
        model's, submission/rules/models.yaml max_position); the engine's own limit is checked once the data sets are
        read (submission/budget/capacity.py)."""
        longest = reference_facts(self.benchmark, self.model.name).get("max_position")
        for field in ("max_tokens", "accuracy_max_tokens"):
            value = getattr(self.generation, field)
            if longest and value is not None and value > longest:
                raise ValueError(f"generation.{field}: {value} is over {self.model.name}'s context of {longest} "
                                 f"tokens (submission/rules/models.yaml max_position); give at most {longest}")
        return self


class ComplianceSpec(Input):
    """Which audits run and how. The tests themselves come from the round's rules for each benchmark."""

    run: Literal["auto", "always", "never"] = Field(
        "auto", description="auto: in the closed and network divisions (the open division skips compliance); "
                            "always: in every division; never: no audits")
    server_qps_factor: float = Field(0.97, gt=0, le=1,
                                     description="Server and Interactive audits run at this fraction of the "
                                                 "scenario's target_qps")
    overrides: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="smoke profile only: audit.config values replaced per test, e.g. "
                                          "TEST09 output-length bounds that fit a tiny model")


class GatesSpec(Input):
    """Acceptance gates of the report (submission/checks/gates.py): a failing gate is reported, it does not fail the
    run."""

    server_offline_min_ratio: float | None = Field(0.9, gt=0, description="Server result over Offline result at "
                                                                          "least this (None: report only)")
    scaling_floor: float = Field(0.95, gt=0, le=1, description="throughput at N nodes over N x one node, at least")
    accuracy_margin_min: float = Field(0.0, description="accuracy over its target, in percent of the target")
    regression_tolerance: float = Field(0.05, ge=0, lt=1, description="largest drop against the previous run of "
                                                                       "the plan, as a fraction")
    published_min_fraction: float | None = Field(
        None, gt=0, description="each result per accelerator over the best published one of the same accelerator "
                                "(submission/results/published.py), at least this (e.g. 0.8); None: reported only")


MAX_LINK_EXPIRY_S = 7 * 24 * 3600   # SigV4 refuses X-Amz-Expires above 604800 s (AWS S3 API reference,
                                    # "Authenticating Requests: Using Query Parameters")
LINK_EXPIRY_S = 3600   # long enough to mint a link, hand it on and fetch a tarball (a download begun before the
                       # expiry completes); a fresh one is one `podium link` away (docs/operations.md, "Download links")


class StorageSpec(Input):
    endpoint_url: str | None = Field(None, description="S3 endpoint; None means AWS")
    bucket: str = Field(description="the bucket the run folders go to")
    prefix: str = Field("", description="the key prefix: runs go to <prefix>/<plan name>/<flow run id>/")
    region: str = Field("us-east-1", description="the S3 region")
    embedded: bool = Field(False, description="use Podium's own local SeaweedFS server (started when not running)")
    link_expiry_s: int = Field(LINK_EXPIRY_S, description="how long a presigned URL `podium link` mints for this "
                                                          "storage stays valid, in seconds (at most 7 days)")

    @field_validator("link_expiry_s")
    @classmethod
    def _link_lifetime(cls, v: int) -> int:
        if not 0 < v <= MAX_LINK_EXPIRY_S:
            raise ValueError(f"{v} s is outside 1..{MAX_LINK_EXPIRY_S} (SigV4 presigned URLs live at most 7 days); "
                             f"e.g. link_expiry_s: {LINK_EXPIRY_S}")
        return v

    @model_validator(mode="after")
    def _one_endpoint(self) -> StorageSpec:
        if self.embedded and self.endpoint_url:
            raise ValueError("embedded storage picks its own endpoint; remove endpoint_url or set embedded: false")
        return self


class Plan(Input):
    name: SafeName = Field(description="the plan's name: its runs' folder in object storage, <prefix>/<name>/")
    round: str = Field(description="the MLPerf round whose rules apply, e.g. v6.1 (submission/rules/<round>.yaml)")
    division: Literal["closed", "open", "network"] = Field(description="the division the tree is submitted in")
    profile: Literal["submission", "smoke"] = Field(description="submission: the round's rules in full; smoke: "
                                                    "shortened runs, each shortcut a named deviation, never a "
                                                    "submission")
    submitter: SafeName = Field(description="the submitting organisation as MLCommons knows it: the tree's "
                                "<division>/<submitter>/ folder and every result row")
    systems: list[SystemSpec] = Field(min_length=1, description="the systems under test")
    benchmarks: list[BenchmarkSpec] = Field(min_length=1, description="what to measure: each a benchmark on one "
                                            "system, with its engine, model, data sets and scenarios")
    storage: StorageSpec = Field(description="the S3-compatible object storage every run folder is published to")
    compliance: ComplianceSpec = Field(ComplianceSpec(), description="the compliance audits")
    gates: GatesSpec = Field(GatesSpec(), description="the acceptance gates of the report")
    inference_src: str | None = Field(None, description="mlcommons/inference, the folder `podium fetch-inference` "
                                                        "prints: its official compliance/TESTxx/run_verification.py "
                                                        "scripts and its submission checker run too")
    fetch: dict[str, FetchSource] = Field(default_factory=dict, description="the source archives of the round's "
                                          "tools that `podium fetch PLAN` brings, destination -> source, e.g. "
                                          "/mnt/mlperf/src/inference: {github: mlcommons/inference} (at the round's "
                                          "commit; inference_src reads it) or the endpoints client's source")


    @field_validator("round")
    @classmethod
    def _known_round(cls, v: str) -> str:
        if v not in ROUNDS:
            raise ValueError(f"unknown round {v!r}; {did_you_mean(v, ROUNDS)}")
        return v

    @model_validator(mode="after")
    def _against_rules(self) -> Plan:
        rules = load_rules(self.round)
        systems = {s.name for s in self.systems}
        for i, b in enumerate(self.benchmarks):
            where = f"benchmarks.{i}"
            if b.benchmark not in rules.benchmarks:
                raise ValueError(f"{where}.benchmark: unknown benchmark {b.benchmark!r}; "
                                 f"{did_you_mean(b.benchmark, rules.benchmarks)}")
            bench = rules.benchmark(b.benchmark)
            if b.system not in systems:
                raise ValueError(f"{where}.system: {b.system!r} is not among systems; "
                                 f"{did_you_mean(b.system, systems)}")
            for name, sc in b.scenarios.items():
                if name not in bench.allowed_scenarios:
                    raise ValueError(f"{where}.scenarios: {name!r} is not a {b.benchmark} scenario; "
                                     f"{did_you_mean(name, bench.allowed_scenarios)}")
                if name != "Offline" and sc.target_qps is None:
                    raise ValueError(f"{where}.scenarios.{name}.target_qps is required for {name}, e.g. target_qps: 2")
            for name in b.dataset.scenarios:
                if name not in b.scenarios:
                    raise ValueError(f"{where}.dataset.scenarios.{name}: the plan runs no {name}; "
                                     f"{did_you_mean(name, b.scenarios)}")
            if not b.scenarios:
                raise ValueError(f"{where}.scenarios: name at least one scenario, e.g. Offline: {{target_qps: 10}}")
            self._harness(where, b, bench)
            if self.division == "closed" and b.model.name != b.benchmark:
                raise ValueError(f"{where}.model.name: the closed division runs the benchmark's own model; "
                                 f"set model.name: {b.benchmark} or use division: open")
            if self.profile == "submission":
                self._submission_rules(where, b, rules)
        return self

    @property
    def strict_description(self) -> bool:
        """Whether the system descriptions may hold no guess (submission/tree/systems.py `gaps`): a closed
        submission."""
        return self.division == "closed" and self.profile == "submission"

    @property
    def audits_enabled(self) -> bool:
        """Whether the compliance audits run: `auto` follows the division (open skips compliance)."""
        return self.compliance.run == "always" or (self.compliance.run == "auto" and self.division != "open")

    @model_validator(mode="after")
    def _compliance_settings(self) -> Plan:
        rules = load_rules(self.round)
        if self.compliance.overrides and self.profile != "smoke":
            raise ValueError("compliance.overrides: only the smoke profile may change audit.config values; "
                             "remove them or use profile: smoke")
        for test, values in self.compliance.overrides.items():
            if test not in rules.audits:
                raise ValueError(f"compliance.overrides: unknown test {test!r}; {did_you_mean(test, rules.audits)}")
            audit = rules.audit(test)
            known = set(audit.settings) | set(audit.benchmark_keys)
            for key in values:
                if key not in known:
                    raise ValueError(f"compliance.overrides.{test}.{key}: not a {test} audit.config value; "
                                     f"{did_you_mean(key, known)}")
        for i, b in enumerate(self.benchmarks):
            if b.benchmark not in rules.benchmarks:
                continue   # reported by _against_rules
            for test in b.dataset.compliance:
                if test not in rules.audits:
                    raise ValueError(f"benchmarks.{i}.dataset.compliance: unknown test {test!r}; "
                                     f"{did_you_mean(test, rules.audits)}")
            bench = rules.benchmark(b.benchmark)
            for test in bench.compliance_tests if self.audits_enabled else ():
                if test in bench.dataset.files and test not in b.dataset.compliance:
                    raise ValueError(f"benchmarks.{i}.dataset.compliance.{test}: {b.benchmark} runs {test} on its own "
                                     f"data set; name it, e.g. compliance: {{{test}: {bench.dataset.files[test]}}}, "
                                     f"or set compliance.run: never")
        return self

    @model_validator(mode="after")
    def _fetch_pinned(self) -> Plan:
        """Every destination of a benchmark's `fetch` is read by it, the plan's own `fetch` holds source archives
        (mlcommons/inference where inference_src reads it), and every repository is at a commit: the round's pin
        where the rules hold one, else the plan's own."""
        rules = load_rules(self.round)
        problems = fetch_problems("", self.fetch, None, rules, self.inference_src) + [
            p for i, b in enumerate(self.benchmarks)
            for p in fetch_problems(f"benchmarks.{i}", b.fetch, [s for _, _, s in b.sources()], rules)]
        if problems:
            raise ValueError("\n  - ".join(problems))
        fetch_items(self.benchmarks, rules, self.fetch)   # one source per destination
        return self

    def fetches(self) -> list[FetchItem]:
        """Every input `podium fetch` brings, once per destination, each repository at its commit."""
        return fetch_items(self.benchmarks, load_rules(self.round), self.fetch)

    @model_validator(mode="after")
    def _engine_fits_system(self) -> Plan:
        for i, b in enumerate(self.benchmarks):
            nodes = getattr(b.engine.config(), "nodes", 1)
            system = next((s for s in self.systems if s.name == b.system), None)
            if system is not None and nodes > system.nodes:
                raise ValueError(f"benchmarks.{i}.engine.options.nodes: the engine spans {nodes} nodes but system "
                                 f"{system.name!r} has {system.nodes}; set that system's nodes: {nodes}")
        return self

    @model_validator(mode="after")
    def _platforms(self) -> Plan:
        """Each system's GPU platform by its description's accelerator name (submission/plan/platforms.py): a name
        that means no platform Podium runs engines on, or two, is refused here; each engine learns its system's, and
        one that runs on NVIDIA's alone is refused on another's."""
        found = {}
        for i, system in enumerate(self.systems):
            try:
                found[system.name] = platform_of(system.description)
            except PlanError as e:
                raise ValueError(f"systems.{i}.description.{MODEL_FIELD}: {e.message}; {e.fix}") from None
        for i, b in enumerate(self.benchmarks):
            platform = found.get(b.system, DEFAULT_PLATFORM)
            if platform.name not in ENGINE_PLATFORMS.get(b.engine.name, tuple(PLATFORMS)):
                raise ValueError(f"benchmarks.{i}.engine.name: {b.engine.name} runs on "
                                 f"{' and '.join(PLATFORMS[p].vendor for p in ENGINE_PLATFORMS[b.engine.name])} GPUs "
                                 f"only, but system {b.system!r} has {platform.vendor}'s; serve it with vllm or "
                                 "sglang, which have ROCm builds")
            b.engine._platform = platform.name
        return self

    @model_validator(mode="after")
    def _replicas_fit(self) -> Plan:
        """Each engine's replicas fit its system's nodes and each node's GPUs; their readiness counts and losses are
        counts of replicas (the layout is resolved here, N defaulting to the system's nodes)."""
        found = []
        for i, b in enumerate(self.benchmarks):
            spec, system = b.engine.replicas, next((s for s in self.systems if s.name == b.system), None)
            if spec is None or system is None:
                continue
            k8s = b.engine.kubernetes
            found += [f"benchmarks.{i}.engine.{p}" for p in replica_problems(
                spec, b.engine.config(), launcher=b.engine.launcher, endpoint_url=k8s.endpoint_url if k8s else None,
                system=system.name, system_nodes=system.nodes, description=system.description, harness=self.harness(b))]
            b.engine._layout = replica_layout(spec, b.engine.config(), system.nodes)
        if found:
            raise ValueError("\n  - ".join(found))
        return self

    @model_validator(mode="after")
    def _serving_rules(self) -> Plan:
        """A closed submission serves each benchmark as its reference requires (the round's `serving` rules)."""
        if self.profile != "submission" or self.division != "closed":
            return self
        rules = load_rules(self.round)
        problems = [p for i, b in enumerate(self.benchmarks)
                    for p in serving_problems(f"benchmarks.{i}", rules.benchmark(b.benchmark), b.engine.config(),
                                              b.generation, b.model.weight_data_types)]
        if problems:
            raise ValueError("\n  - ".join(problems))
        return self

    @model_validator(mode="after")
    def _runs_last_their_min_duration(self) -> Plan:
        """Each Offline run at its target_qps issues what its client counts (client_length: loadgen's 1.1 x min
        duration x target, the endpoints client's whole passes over its data set); at the scenario's expected_qps it
        must still last its min duration (the round's 600 s: loadgen calls a shorter Offline run INVALID; for the
        endpoints client the v6.1 README's 10-minute rule, which the official checker does not measure). Submission
        plans only: a smoke data set's rows are its own."""
        problems = [p for run in offline_runs(self) if (p := run.problem())]
        if problems:
            raise ValueError("\n  - ".join(problems))
        return self

    @model_validator(mode="after")
    def _smoke_latency(self) -> Plan:
        """A relaxed latency bound is a smoke deviation, each of the client that judges it: the p99 latency of the
        endpoints client (loadgen would read it as a target_latency the checker forbids), TTFT and TPOT of loadgen."""
        for i, b in enumerate(self.benchmarks):
            for name, sc in b.scenarios.items():
                for field, client in (("latency_ms", "endpoints"), ("ttft_ms", "loadgen"), ("tpot_ms", "loadgen")):
                    if getattr(sc, field) is not None and (self.profile != "smoke" or self.harness(b) != client):
                        raise ValueError(f"benchmarks.{i}.scenarios.{name}.{field}: only a smoke plan measured by "
                                         f"the {client} client may relax this bound; remove it")
        return self

    @model_validator(mode="after")
    def _guided_decoding_sent(self) -> Plan:
        """Guided decoding reaches the engine only through a client that sends the answer schema (after the serving
        rules, which refuse it in a closed plan first)."""
        for i, b in enumerate(self.benchmarks):
            chosen = self.harness(b)
            unsupported = load_generation().guided_decoding_clients_unsupported.get(chosen)
            if b.generation.guided_decoding and unsupported:
                raise ValueError(f"benchmarks.{i}.generation.guided_decoding: {b.benchmark} is measured by the "
                                 f"{chosen} client, which cannot send the answer schema ({unsupported}); set "
                                 "guided_decoding: false")
        return self

    def _harness(self, where: str, b: BenchmarkSpec, bench: Any) -> None:
        """The round's client measures the benchmark (`harness:` in its rules); the smoke profile may measure an
        endpoints benchmark with loadgen instead, a named deviation (docs/benchmarks.md, "Which client")."""
        chosen = b.harness or bench.harness
        if chosen != bench.harness and not (self.profile == "smoke" and chosen == "loadgen"):
            allowed = " (the smoke profile may use loadgen, a named deviation)" if bench.harness == "endpoints" else ""
            raise ValueError(f"{where}.harness: {b.benchmark} is measured by the {bench.harness} client in "
                             f"{self.round} (rules harness: {bench.harness}; {bench.harness_source}); remove "
                             f"harness: {chosen}{allowed}")
        if chosen == "loadgen" and "Interactive" in b.scenarios and bench.interactive_loadgen_model is None:
            raise ValueError(f"{where}.scenarios.Interactive: loadgen has no {b.benchmark} Interactive settings "
                             f"(mlperf.conf has no block for it); measure it with harness: endpoints, or drop "
                             f"Interactive")

    def harness(self, b: BenchmarkSpec) -> Harness:
        """The client that measures benchmark `b`: the plan's choice, else the round's."""
        return b.harness or load_rules(self.round).benchmark(b.benchmark).harness

    def _submission_rules(self, where: str, b: BenchmarkSpec, rules: Any) -> None:
        """The `submission` profile allows no value under the round's minimums."""
        bench = rules.benchmark(b.benchmark)
        missing = [s for s in bench.required_scenarios if s not in b.scenarios]
        if missing:
            raise ValueError(f"{where}.scenarios: {b.benchmark} requires {', '.join(missing)}")
        if bench.one_of_scenarios and not set(bench.one_of_scenarios) & set(b.scenarios):
            raise ValueError(f"{where}.scenarios: {b.benchmark} needs one of {', '.join(bench.one_of_scenarios)}")
        for name in b.scenarios:
            own = bench.scenario(name).dataset
            if own is not None and name not in b.dataset.scenarios:
                raise ValueError(f"{where}.dataset.scenarios.{name}: {b.benchmark} {name} runs its own data set, "
                                 f"{own.name} ({own.size} rows); name its file, e.g. scenarios: {{{name}: "
                                 f"/data/{own.name.rsplit('/', 1)[-1]}.parquet}}")
        durations = [("loadgen.min_duration_ms", b.loadgen.min_duration_ms)] + [
            (f"scenarios.{n}.min_duration_ms", s.min_duration_ms) for n, s in b.scenarios.items()]
        for field, value in durations:
            if value is not None and value < rules.min_duration_ms:
                raise ValueError(f"{where}.{field}: {value} is under the round's minimum of "
                                 f"{rules.min_duration_ms} ms; "
                                 f"remove it or use profile: smoke")
        if b.loadgen.performance_sample_count is not None and \
                b.loadgen.performance_sample_count < bench.performance_sample_count:
            raise ValueError(f"{where}.loadgen.performance_sample_count: {b.loadgen.performance_sample_count} is under "
                             f"{bench.performance_sample_count}; remove it or use profile: smoke")
        if b.loadgen.accuracy_sample_count is not None:
            raise ValueError(f"{where}.loadgen.accuracy_sample_count: a submission scores the whole accuracy set; "
                             f"remove it or use profile: smoke")

    def benchmark(self, key: str) -> BenchmarkSpec:
        for b in self.benchmarks:
            if b.key == key:
                return b
        raise PlanError(f"no benchmark {key!r} in plan {self.name!r}",
                        fix=did_you_mean(key, [b.key for b in self.benchmarks]))

    def system(self, name: str) -> SystemSpec:
        return next(s for s in self.systems if s.name == name)

    def pools(self) -> dict[str, str]:
        """system -> the work pool it runs on, for the systems that name one (docs/fleet.md)."""
        return {s.name: s.work_pool for s in self.systems if s.work_pool}

    def only(self, systems: Collection[str]) -> Plan:
        """This plan cut to the named systems and their benchmarks: what one cluster checks and runs."""
        return self.model_copy(update={"systems": [s for s in self.systems if s.name in systems],
                                       "benchmarks": [b for b in self.benchmarks if b.system in systems]})

    def local(self) -> Plan:
        """The systems that run in the process that runs the plan (no work pool), with their benchmarks."""
        return self.only({s.name for s in self.systems if not s.work_pool})

    def as_member(self, system: str) -> Plan:
        """The plan as the fleet member of `system` runs it on that system's cluster: that system alone, run here."""
        cut = self.only({system})
        return cut.model_copy(update={"systems": [s.model_copy(update={"work_pool": None}) for s in cut.systems]})

    def fingerprint(self) -> str:
        """sha256 of the validated plan as the tree keeps it (each engine env value as `<set>`: a secret is neither
        published nor hashed): what tags every uploaded object."""
        return hashlib.sha256(json.dumps(shown_plan(self.model_dump(mode="json")), sort_keys=True).encode()).hexdigest()


def _location(error: dict[str, Any]) -> str:
    return ".".join(str(p) for p in error["loc"])


def _describe(error: dict[str, Any]) -> str:
    kind, loc = error["type"], _location(error)
    if kind == "extra_forbidden":
        return f"{loc}: unknown field; remove it or check its spelling"
    if kind == "missing":
        return f"{loc}: required field is missing"
    message = reason(error)
    return f"{loc}: {message}" if error["loc"] else message   # plan-level checks name their own field


def parse(data: Any, source: str = "<plan>") -> Plan:
    """Validate plain data as a Plan; every problem names its field."""
    if not isinstance(data, dict):
        raise PlanError("a plan is a YAML mapping with name, round, division, profile, submitter, systems, "
                        "benchmarks and storage", where=source)
    deep = [key for key, value in data.items() if 1 + levels(value, 2) > MAX_DEPTH]
    if deep:
        raise PlanError(f"{deep[0]}: nested more than {MAX_DEPTH} levels deep", where=source,
                        fix="a plan is a few levels deep; remove the nesting (deployments/plans/smoke.yaml is a "
                            "complete example)")
    try:
        return Plan.model_validate(data)
    except ValidationError as e:
        problems = "\n  - ".join(_describe(err) for err in e.errors())
        raise PlanError(f"invalid plan:\n  - {problems}", where=source,
                        fix="see deployments/plans/smoke.yaml for a complete example") from None


def read(path: str | Path) -> Any:
    """A plan file's YAML as plain data, before validation, a fleet's `plans:` parts merged in
    (submission/plan/parts.py)."""
    return expand(read_yaml(path), Path(path), read_yaml)


def read_yaml(path: str | Path) -> Any:
    """A plan file's YAML as it is; a file that cannot be read, is not UTF-8, is not YAML or nests deeper than the
    YAML parser follows is a PlanError naming it (a plan is a few levels deep)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise PlanError(f"cannot read the plan: {e.strerror}", where=str(path),
                        fix="pass the path of a plan YAML file, e.g. deployments/plans/smoke.yaml") from None
    except UnicodeDecodeError as e:
        line = e.object[:e.start].count(b"\n") + 1
        raise PlanError(f"not UTF-8 text: byte 0x{e.object[e.start]:02x} at byte {e.start}", where=f"{path}:{line}",
                        fix="save the plan as UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = " ".join(str(getattr(e, "problem", None) or e).split())
        raise PlanError(f"not valid YAML: {problem}", where=where,
                        fix="correct the YAML there; deployments/plans/smoke.yaml is a complete example") from None
    except RecursionError:
        raise PlanError("nested deeper than the YAML parser follows", where=str(path),
                        fix="a plan is a few levels deep; remove the nesting (deployments/plans/smoke.yaml is a "
                            "complete example)") from None


def load(path: str | Path) -> Plan:
    """Read and validate a plan file. A fleet that does not validate has each part validated alone first, so the
    error names the part's file and field where the part alone is at fault (submission/plan/parts.py)."""
    path = Path(path)
    data = read(path)
    try:
        return parse(data, str(path))
    except PlanError:
        for part in files(read_yaml(path), path):
            parse(read_yaml(part), str(part))
        raise
