"""The MLPerf rules of each round as data: `<round>.yaml` beside this module, read into frozen models.

Every number in the data files cites its source (mlperf.conf line, checker constant, README); code asks questions:
`load_rules("v6.1").benchmark("gpt-oss-120b").scenario("Interactive").ttft_ms`. A new round is a new data file.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, TypeVar

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from submission.base.errors import PlanError, did_you_mean
from submission.base.schema import Strict

_DATA = Path(__file__).parent
_MS_TO_NS = 1_000_000
_T = TypeVar("_T")
Scenario = Literal["Offline", "Server", "Interactive"]
Harness = Literal["loadgen", "endpoints"]   # the measuring clients: mlcommons-loadgen, the MLCommons endpoints client
AuditValue = int | float


ROUNDS: tuple[str, ...] = tuple(  # the rounds that have a data file, oldest first (v6.0 < v6.1 < v6.10)
    p.stem for p in sorted(_DATA.glob("v*.yaml"), key=lambda p: [int(n) for n in re.findall(r"\d+", p.stem)]))


def _pick(kind: str, name: str, table: Mapping[str, _T], where: str) -> _T:
    """`table[name]`, or a PlanError naming the bad value and the valid ones."""
    if name in table:
        return table[name]
    raise PlanError(f"unknown {kind} {name!r} in {where}", fix=did_you_mean(name, table))


def _ns(ms: float | None) -> int | None:
    return None if ms is None else round(ms * _MS_TO_NS)


def _named(value: object) -> object:
    """Fill each entry's `name` from its key, so the data files need not repeat it."""
    if isinstance(value, dict):
        return {k: {"name": k, **v} if isinstance(v, dict) else v for k, v in value.items()}
    return value


class Seeds(Strict):
    qsl_rng_seed: int
    sample_index_rng_seed: int
    schedule_rng_seed: int


class Checkpoint(Strict):
    """The reference checkpoint the round names: a Hugging Face model repository at a commit."""

    name: str                        # the repository, e.g. openai/gpt-oss-120b
    revision: str = Field(pattern=r"^[0-9a-f]{40}$")


class Dataset(Strict):
    name: str
    revision: str | None = Field(None, pattern=r"^[0-9a-f]{40}$")   # the Hugging Face commit, for a hub data set
    # role (performance, accuracy, TESTxx) -> file name inside the dataset
    files: dict[str, str] = Field(default_factory=dict)
    size: int


class AccuracyTarget(Strict):
    """One metric the checker reads from accuracy.txt. No `target` means only the upper limit applies, if seen."""

    metric: str
    target: float | None = None
    upper_limit: float | None = None
    pattern: str | None = None

    @property
    def required(self) -> bool:
        """The checker fails a result whose accuracy.txt lacks a metric that has a target."""
        return self.target is not None

    def passes(self, value: float) -> bool:
        return (self.target is None or value >= self.target) and (self.upper_limit is None or value <= self.upper_limit)

    def read(self, text: str) -> float | None:
        """The metric's value in accuracy.txt text, found with the checker's pattern; None if absent."""
        match = re.search(self.pattern, text, re.MULTILINE) if self.pattern else None
        return float(match.group(1)) if match else None


class ScenarioRules(Strict):
    name: Scenario
    loadgen_scenario: Literal["Offline", "Server"]
    ttft_ms: float | None
    tpot_ms: float | None
    latency_ms: float | None
    # the checker's latency-constraint: the most a Server run's effective target latency (loadgen's
    # `target_latency`, which a user.conf may raise and early stopping is judged at) may be; None: no cap
    max_target_latency_ms: float | None = None
    result_field: str
    unit: str
    accuracy_sample_count: int
    accuracy: tuple[AccuracyTarget, ...]
    dataset: Dataset | None = None  # only where the scenario has its own dataset (Qwen3-VL Interactive)

    @property
    def ttft_ns(self) -> int | None:
        return _ns(self.ttft_ms)

    @property
    def tpot_ns(self) -> int | None:
        return _ns(self.tpot_ms)

    @property
    def latency_ns(self) -> int | None:
        return _ns(self.latency_ms)

    @property
    def max_target_latency_ns(self) -> int | None:
        return _ns(self.max_target_latency_ms)


class SpeculativeRule(Strict):
    """The speculative decoding a benchmark allows (inference_rules.adoc, appendix-speculative-decoding): in which
    scenarios, which algorithm (the engine's names for the reference's), its configuration and the reference head."""

    source: str
    scenarios: tuple[Scenario, ...]
    style: str                       # the appendix's words, e.g. "EAGLE-style decoding with the MTP head"
    algorithms: tuple[str, ...]      # the engine's names for it (SGLang: EAGLE, and NEXTN, its alias)
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int            # what the configuration implies (num_steps + 1 at top-k 1)
    mtp_head: str                    # the reference checkpoint whose MTP head drafts
    precision: str                   # the head's precision as provided (a model.weight_data_types word)


class ServingRules(Strict):
    """How a closed-division engine must serve the benchmark, as its reference README says (`source`)."""

    source: str
    prefix_caching: bool | None = None  # False: the engine runs with prefix caching off, said explicitly
    image_budget_keys: tuple[str, ...] = ()  # multimodal processor keys that change an image or its token count
    reference_sampling: bool = False  # a plan's sampling is the reference's (submission/rules/generation.yaml)
    guided_decoding: bool | None = None  # the value a plan's generation.guided_decoding must have; None: either
    speculative_decoding: SpeculativeRule | None = None  # None: no speculative decoding in the closed division


class BenchmarkRules(Strict):
    name: str
    loadgen_model: str
    interactive_loadgen_model: str | None
    harness: Harness                 # the client that measures it in the round (its reference implementation)
    harness_source: str              # where the round says so
    endpoints_allowed: bool
    accuracy_class: Literal["99", "99.9"]  # the share of the reference's accuracy its targets demand, in %
    checkpoint: Checkpoint | None = None   # the reference checkpoint, where the round pins one
    dataset: Dataset
    performance_sample_count: int
    required_scenarios: tuple[Scenario, ...]
    one_of_scenarios: tuple[Scenario, ...]
    use_token_latencies: bool
    offline_min_samples_per_query: int
    offline_min_query_count: int | None  # mlperf.conf `<model>.Offline.min_query_count`; None: user.conf must set it
    # mlperf.conf `<model>.*.sample_concatenate_permutation` (equal issue): loadgen pads a performance run's Offline
    # samples and Server queries to whole passes over its performance sample set
    sample_concatenate_permutation: bool
    min_queries: dict[str, int]
    compliance_tests: tuple[str, ...]
    serving: ServingRules | None = None  # the reference's serving constraints, where its README states them
    scenarios: dict[str, ScenarioRules]

    @field_validator("scenarios", mode="before")
    @classmethod
    def _name_scenarios(cls, value: object) -> object:
        return _named(value)

    @model_validator(mode="after")
    def _scenarios_match(self) -> BenchmarkRules:
        if set(self.scenarios) != set(self.allowed_scenarios):
            raise ValueError(f"{self.name}: scenarios {sorted(self.scenarios)} differ from {self.allowed_scenarios}")
        if (self.accuracy_class == "99.9") != ("99.9" in self.name):   # how the checker tells the class
            raise ValueError(f"{self.name}: accuracy_class {self.accuracy_class} disagrees with the name (the checker "
                             f"treats a model as 99.9 exactly when its name contains 99.9)")
        return self

    @property
    def allowed_scenarios(self) -> tuple[str, ...]:
        return self.required_scenarios + self.one_of_scenarios

    def scenario(self, name: str) -> ScenarioRules:
        return _pick("scenario", name, self.scenarios, f"benchmark {self.name}")

    def model_for(self, scenario: str, harness: Harness) -> str:
        """The model name of the run's settings: loadgen's `FromConfig` block (`loadgen_model_for`), or for the
        endpoints client (which reads no mlperf.conf) the benchmark's loadgen model in every scenario."""
        return self.loadgen_model_for(scenario) if harness == "loadgen" else self.loadgen_model

    def loadgen_model_for(self, scenario: str) -> str:
        """The model name loadgen's `FromConfig` takes: Interactive runs the `-interactive` mlperf.conf block."""
        if self.scenario(scenario).name != "Interactive":
            return self.loadgen_model
        if self.interactive_loadgen_model is None:
            raise PlanError(f"benchmark {self.name} has no loadgen Interactive model (mlperf.conf has no block for it)",
                            fix=f"run {self.name} Interactive with the {self.harness} harness, or choose "
                                f"{', '.join(s for s in self.allowed_scenarios if s != 'Interactive')}")
        return self.interactive_loadgen_model


class SystemFields(Strict):
    required: tuple[str, ...]
    non_empty: tuple[str, ...]
    allowed: dict[str, tuple[str, ...]]
    case_insensitive: tuple[str, ...]


class RequiredFiles(Strict):
    accuracy: tuple[str, ...]
    performance: tuple[str, ...]
    optional_performance: tuple[str, ...]
    scenario_root: tuple[str, ...]


class AuditRules(Strict):
    """One compliance test's audit.config, as values; `config_lines` gives the file's lines."""

    name: str
    purpose: str
    settings: dict[str, AuditValue]
    scenarios: tuple[str, ...] = ()  # when set, settings are written once per loadgen scenario (TEST04)
    extra_lines: tuple[str, ...] = ()  # model-qualified lines copied as they are
    benchmark_keys: tuple[str, ...] = ()  # keys whose value depends on the benchmark
    per_benchmark: dict[str, dict[str, AuditValue]] = Field(default_factory=dict)
    verify_files: tuple[str, ...]
    # pass criteria the verification scripts apply (never in audit.config)
    criteria: dict[str, AuditValue] = Field(default_factory=dict)

    def values(self, benchmark: str | None = None) -> dict[str, AuditValue]:
        """The settings for `benchmark` (a checker name, e.g. gpt-oss-120b), per-benchmark values merged in."""
        merged = {**self.settings, **self.per_benchmark.get(benchmark or "", {})}
        missing = [key for key in self.benchmark_keys if key not in merged]
        if missing:
            known = ", ".join(sorted(self.per_benchmark)) or "none"
            raise PlanError(f"{self.name} audit.config needs {', '.join(missing)} for benchmark {benchmark!r}, "
                            f"which the rules do not give", fix=f"benchmarks with {self.name} values: {known}")
        return merged

    def config_lines(self, benchmark: str | None = None) -> list[str]:
        """The non-comment lines of audit.config, e.g. `*.*.mode = 2`."""
        values = self.values(benchmark)
        scopes = self.scenarios or ("*",)
        return [f"*.{scope}.{key} = {value}" for scope in scopes for key, value in values.items()] + list(
            self.extra_lines)


class SourcePin(Strict):
    """Upstream sources pinned: the git repository and the full commit the round uses (the official tools' sources,
    the measuring client's)."""

    repository: str
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")

    @property
    def github(self) -> str | None:
        """owner/name when the repository is on GitHub (its archives: github.com/<owner>/<name>/archive/...)."""
        found = re.fullmatch(r"https://github\.com/([^/]+/[^/]+?)(?:\.git)?/?", self.repository)
        return found.group(1) if found else None


class LiveCodeBenchRelease(Strict):
    """A LiveCodeBench release as an accuracy score runs its tests: the Hugging Face data set's files at a commit."""

    repo: str                        # livecodebench/code_generation_lite
    revision: str = Field(pattern=r"^[0-9a-f]{40}$")
    files: tuple[str, ...] = Field(min_length=1)   # the release's JSON-lines files, in the order the reference reads


class Rules(Strict):
    round: str
    seeds: Seeds
    inference_sources: SourcePin   # mlcommons/inference: the checker, audits and references every value cites
    endpoints_client: SourcePin | None = None   # None: the round has no endpoints (loadgen-less) results
    livecodebench: dict[str, LiveCodeBenchRelease] = Field(default_factory=dict)   # release -> its files
    math_grader: SourcePin | None = None   # openai/prm800k: the MATH-500 grader deepseek-r1's reference imports
    min_duration_ms: int
    loadgen_min_query_count: int   # loadgen's own default, where neither mlperf.conf nor user.conf sets one
    max_accuracy_log_bytes: int
    system_fields: SystemFields
    measurement_fields: tuple[str, ...]
    required_files: RequiredFiles
    audits: dict[str, AuditRules]
    benchmarks: dict[str, BenchmarkRules]

    @field_validator("audits", "benchmarks", mode="before")
    @classmethod
    def _name_entries(cls, value: object) -> object:
        return _named(value)

    @model_validator(mode="after")
    def _compliance_known(self) -> Rules:
        for bench in self.benchmarks.values():
            unknown = set(bench.compliance_tests) - set(self.audits)
            if unknown:
                raise ValueError(f"{bench.name}: compliance tests {sorted(unknown)} have no audits entry")
        return self

    def benchmark(self, name: str) -> BenchmarkRules:
        return _pick("benchmark", name, self.benchmarks, f"round {self.round}")

    def hub_pins(self) -> dict[str, str]:
        """Hugging Face repository -> the commit the round pins it at: the reference checkpoints and the data sets
        (each scenario's own too) that the round names with a revision, and the LiveCodeBench releases' data set."""
        pins = {}
        for bench in self.benchmarks.values():
            sets = [bench.dataset, *(s.dataset for s in bench.scenarios.values() if s.dataset is not None)]
            pins.update({d.name: d.revision for d in sets if d.revision})
            if bench.checkpoint is not None:
                pins[bench.checkpoint.name] = bench.checkpoint.revision
        pins.update({release.repo: release.revision for release in self.livecodebench.values()})
        return pins

    def source_pins(self) -> dict[str, str]:
        """GitHub owner/name -> the commit the round pins it at: the official sources, the endpoints client and the
        MATH-500 grader."""
        pins = (self.inference_sources, self.endpoints_client, self.math_grader)
        return {pin.github: pin.commit for pin in pins if pin is not None and pin.github is not None}

    def audit(self, test: str) -> AuditRules:
        return _pick("compliance test", test, self.audits, f"round {self.round}")


@functools.lru_cache(maxsize=16)
def load_rules(round: str) -> Rules:
    """The rules of `round` (e.g. "v6.1"), read once from `<round>.yaml`."""
    if round not in ROUNDS:
        raise PlanError(f"no rules for round {round!r}", fix=did_you_mean(round, ROUNDS))
    path = _DATA / f"{round}.yaml"
    try:
        rules = Rules.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except (yaml.YAMLError, ValidationError) as error:
        raise PlanError(f"invalid rules file: {error}", where=str(path)) from error
    if rules.round != round:
        raise PlanError(f"file says round {rules.round!r}", where=str(path), fix=f"set round: {round}")
    return rules


@functools.cache
def model_rules() -> dict:
    """rules/models.yaml: the reference models' facts (parts, context, weight and KV sizes), for every round."""
    return yaml.safe_load((Path(__file__).parent / "models.yaml").read_text())


def reference_facts(benchmark: str, model: str) -> dict:
    """models.yaml's facts of `benchmark`'s reference model when `model` (the plan's model.name) is that model
    (llama2-70b serves llama2-70b-99.9); a substitute (the smoke plans' tiny Llama as gpt-oss-120b) has none."""
    if not benchmark.lower().startswith(model.lower()):
        return {}
    return model_rules()["models"].get(benchmark, {})
