"""Will it fit, before any GPU is allocated: each engine worker's share of the weights against its GPUs' memory, and
each run's longest sequence against the engine's sequence limit.

Weights are counted by part (experts, attention, embeddings, lm_head, router, vision, other): from the staged model's
tensors (submission/budget/checkpoint.py, which also refuses a checkpoint of another type than
`model.weight_data_types`)
or, before staging, from the plan (the reference model's parts in rules/models.yaml, its quantized parts in the
declared type and the rest in BF16). Each engine's sharding rule gives a worker's bytes per GPU (ATTENTION_DP_WHOLE);
beside them each GPU keeps a runtime reserve and needs KV cache for at least one sequence of the engine's limit (vLLM
refuses to start otherwise). A run needs its longest prompt plus its `max_tokens` within the engine's
`max_model_len` / `max_seq_len`: TRT-LLM's PyTorch backend silently lowers `max_tokens` to fit, vLLM rejects each
longer request. Facts of the reference models and data types: rules/models.yaml.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from submission.base.errors import PlanError
from submission.budget import checkpoint
from submission.plan.engine_options import Worker
from submission.plan.model import BenchmarkSpec, Plan
from submission.rules import Rules, model_rules
from submission.rules import reference_facts as rules_reference_facts

_GIB = 1024**3
_SIZE = re.compile(r"^\s*([\d.]+)\s*(G|T)i?B\s*$", re.I)


# Parts every GPU of a TensorRT-LLM worker with `enable_attention_dp` holds whole (PyTorch backend; read in
# NVIDIA/TensorRT-LLM at commit 050b6cb, by construct rather than by line of the 1.2.0 tag):
# attention (tensorrt_llm/_torch/modules/attention.py Attention.__init__: `if config.mapping.enable_attention_dp:
# tp_size = 1`), the embedding (models/modeling_gpt_oss.py Transformer.__init__: "When attention_dp is enabled ... we
# don't do parallelism here"), lm_head (models/modeling_utils.py DecoderModelForCausalLM.__init__: tp_size 1 under
# attention DP) and the router (a plain Linear, models/modeling_gpt_oss.py MLPBlock.gate); the MoE experts are split
# over moe_tp x moe_ep = tp. Without attention DP, and in vLLM, every part is split over TP: VocabParallelEmbedding
# and ParallelLMHead (vllm 0.31.0 model_executor/models/qwen3_moe.py:464, qwen3_vl_moe.py:165), the vision tower by
# weights (config/multimodal.py:205, mm_encoder_tp_mode default "weights"). Pipeline stages split everything.
ATTENTION_DP_WHOLE = frozenset({"attention", "embeddings", "lm_head", "router"})


@dataclass(frozen=True)
class ModelFacts:
    parts: Mapping[str, float] | None   # weight bytes by part (rules/models.yaml tensor_parts); None: unknown
    weight_source: str                  # where they come from, for the table
    kv_elements_per_token: int | None = None   # 2 x layers x kv_heads x head_dim; None: unknown
    kv_heads: int | None = None
    max_position: int | None = None

    @property
    def weight_bytes(self) -> float | None:
        return sum(self.parts.values()) if self.parts is not None else None


def _bits(dtypes: str) -> tuple[str, float] | None:
    """The first data type of `weight_data_types` that rules/models.yaml knows, with its bits per parameter."""
    table = model_rules()["weight_bits"]
    for word in re.split(r"[^a-z0-9_]+", dtypes.lower()):
        if word in table:
            return word, float(table[word])
    return None


def _config(folder: Path | None) -> dict[str, Any]:
    path = folder / "config.json" if folder else None
    if path is None or not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {**data, **data.get("text_config", {})}   # a VLM keeps its language model's shape there


def reference_facts(bench: BenchmarkSpec) -> dict:
    """The reference model's facts when the plan serves that model (submission/rules reference_facts)."""
    return rules_reference_facts(bench.benchmark, bench.model.name)


def estimated_parts(bench: BenchmarkSpec, dtypes: str | None = None) -> tuple[dict[str, float], str] | None:
    """Weight bytes by part before staging, from the plan: the reference model's parts (rules/models.yaml), its
    `quantized` parts in the declared type and the rest in BF16; or `model.parameters` x the declared type."""
    ref, bits = reference_facts(bench), _bits(dtypes or bench.model.weight_data_types)
    if bits is None:
        return None
    word, b = bits
    if bench.model.parameters is None and ref.get("parts"):
        low = {p for p in ref.get("quantized", ref["parts"]) if b < 16}
        parts = {p: float(n) * (b if p in low or b >= 16 else 16) / 8 for p, n in ref["parts"].items()}
        total, rest = sum(map(float, ref["parts"].values())), sum(float(n) for p, n in ref["parts"].items()
                                                                  if p not in low)
        kept = f", the rest ({rest / 1e9:.3g}B) bf16" if low else ""
        return parts, f"{total / 1e9:.4g}B parameters: {' + '.join(sorted(low)) or 'all'} x {word} ({b:g} bits){kept}"
    params = bench.model.parameters or ref.get("parameters")
    if not params:
        return None
    return {"other": float(params) * b / 8}, f"{float(params) / 1e9:g}B parameters x {word} ({b:g} bits)"


def model_facts(bench: BenchmarkSpec, folder: Path | None = None) -> ModelFacts:
    """What the checks know of the model: from its folder when there is one (staged, or a local source)."""
    ref = reference_facts(bench)
    config = _config(folder)
    found = checkpoint.tensors(folder) if folder and folder.is_dir() else []
    if found:
        files = len(list(folder.glob("*.safetensors")))   # type: ignore[union-attr]
        parts: dict[str, float] | None = checkpoint.part_bytes(found, model_rules()["tensor_parts"])
        source = f"{files} safetensors file(s) in {folder}"
    else:
        parts, source = estimated_parts(bench) or (
            None, "unknown: set model.parameters and a known model.weight_data_types, or stage the model")
    layers = config.get("num_hidden_layers", ref.get("layers"))
    kv_heads = config.get("num_key_value_heads", ref.get("kv_heads"))
    head_dim = config.get("head_dim") or ref.get("head_dim")
    if head_dim is None and config.get("hidden_size") and config.get("num_attention_heads"):
        head_dim = config["hidden_size"] // config["num_attention_heads"]
    kv = 2 * layers * kv_heads * head_dim if layers and kv_heads and head_dim else None
    return ModelFacts(parts, source, kv, kv_heads, config.get("max_position_embeddings", ref.get("max_position")))


def weights_per_gpu(parts: Mapping[str, float], w: Worker) -> float:
    """Bytes of weights on each GPU of worker `w`: each part split over its tp x pp GPUs, but the parts its engine
    keeps whole on every GPU of a pipeline stage (ATTENTION_DP_WHOLE under TensorRT-LLM attention DP)."""
    whole = ATTENTION_DP_WHOLE if w.attention_dp else frozenset()
    return sum(n / (w.pp if part in whole else w.tp * w.pp) for part, n in parts.items())


def kv_share(facts: ModelFacts, w: Worker) -> float:
    """The share of one sequence's KV cache on each GPU: KV heads split over TP (each GPU keeps one at least); under
    attention DP a sequence lives on one rank, whose attention has tp_size 1 (all KV heads, modules/attention.py)."""
    if w.attention_dp:
        return 1 / w.pp
    heads = facts.kv_heads or 1
    return max(heads // w.tp, 1) / heads / w.pp


def gpu_capacity(text: str | None) -> float | None:
    """Bytes of one accelerator's memory from a system description value ("186 GB"; GB counted in powers of two, as
    submission/tree/systems.py writes them), or None when it is not a size (N/A, unknown, absent)."""
    match = _SIZE.match(text or "")
    if not match:
        return None
    return float(match.group(1)) * _GIB * (1024 if match.group(2).upper() == "T" else 1)


@dataclass(frozen=True)
class Fit:
    """One kind of worker on its GPUs."""

    worker: Worker
    weights: float       # bytes per GPU
    kv_min: float        # bytes per GPU for one sequence of the engine's limit (0: unknown)
    capacity: float      # bytes of one GPU

    @property
    def usable(self) -> float:
        return self.capacity * self.worker.memory_fraction

    @property
    def headroom(self) -> float:
        """What is left for KV cache once weights and the runtime reserve are in."""
        return self.usable - self.weights - model_rules()["runtime_reserve_gib"] * _GIB

    @property
    def fits(self) -> bool:
        return self.headroom > max(self.kv_min, 0.0)


def _kv_bytes(worker: Worker) -> float:
    return float(model_rules()["kv_bytes"].get((worker.kv_cache_dtype or "auto").lower(), 2))


def fits(workers: tuple[Worker, ...], facts: ModelFacts, capacity: float) -> list[Fit]:
    rows = []
    for w in workers:
        if not w.on_gpu or facts.parts is None:
            continue
        limit = w.max_len or facts.max_position
        kv = 0.0
        if facts.kv_elements_per_token and limit:
            kv = facts.kv_elements_per_token * kv_share(facts, w) * _kv_bytes(w) * limit
        rows.append(Fit(w, weights_per_gpu(facts.parts, w), kv, capacity))
    return rows


def _gb(n: float) -> str:
    return f"{n / _GIB:,.1f} GiB"


def _fit_fix(row: Fit, bench: BenchmarkSpec, facts: ModelFacts) -> str:
    """The same model in NVFP4, and the smallest larger TP that fits."""
    w = row.worker
    fitting = [tp for tp in (2, 4, 8, 16, 32, 64) if tp > w.tp and fits(
        (dataclasses.replace(w, tp=tp),), facts, row.capacity)[0].fits]
    estimate = estimated_parts(bench, "nvfp4")
    four_bit = f" ({_gb(weights_per_gpu(estimate[0], w))} per GPU)" if estimate else ""
    larger = f"{fitting[0]} fits" if fitting else "none up to 64 fits"
    return (f"a smaller weight dtype, e.g. model.weight_data_types: nvfp4{four_bit}, or a larger "
            f"{w.name} tensor_parallel_size ({larger})")


@dataclass(frozen=True)
class Budget:
    """One kind of run: its longest sequence against the engine's limit."""

    run: str                    # performance | accuracy | TEST07 ...
    dataset: str
    max_tokens: int
    prompt_max: int | None      # the data set's longest prompt in tokens; None: not read (not staged here)
    limit: int | None           # the engine's max_model_len / max_seq_len (or the model's own); None: unknown
    limit_field: str

    @property
    def need(self) -> int:
        return (self.prompt_max if self.prompt_max is not None else 1) + self.max_tokens

    @property
    def ok(self) -> bool:
        return self.limit is None or self.need <= self.limit


def run_kinds(plan: Plan, bench: BenchmarkSpec, rules: Rules) -> list[tuple[str, str, int]]:
    """(run, data set, max_tokens) of every kind of run the plan makes of `bench`: performance, accuracy, and each
    audit (on its own data set where the rules give it one), as submission/results/runs.py and tasks/compliance plan
    them."""
    g = bench.generation
    out = [("performance", bench.dataset.performance, g.max_tokens)]
    if bench.accuracy:
        out.append(("accuracy", bench.dataset.accuracy, g.accuracy_max_tokens or g.max_tokens))
    if plan.audits_enabled:
        out += [(test, bench.dataset.compliance.get(test, bench.dataset.performance), g.max_tokens)
                for test in rules.benchmark(bench.benchmark).compliance_tests]
    return out


@dataclass
class Review:
    """The memory fit and sequence budgets of one benchmark's engine."""

    key: str
    facts: ModelFacts
    capacity: float | None
    fits: list[Fit] = field(default_factory=list)
    budgets: list[Budget] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for `--json`, with the rendered lines."""
        fit = [{"worker": f.worker.name, "workers": f.worker.count, "gpus_each": f.worker.tp * f.worker.pp,
                "weights_per_gpu": f.weights, "kv_one_sequence": f.kv_min, "kv_room": f.headroom,
                "usable_per_gpu": f.usable, "capacity": f.capacity, "fits": f.fits} for f in self.fits]
        budgets = [dataclasses.asdict(b) | {"need": b.need, "ok": b.ok} for b in self.budgets]
        return {"fit": fit, "budgets": budgets, "weights": self.facts.weight_source, "problems": self.problems,
                "notes": self.notes, "text": render(self)}


def review(plan: Plan, bench: BenchmarkSpec, rules: Rules, *, model_folder: Path | None = None,
           prompt_max: Mapping[str, int] | None = None, capacity: str | None = None) -> Review:
    """Fit and budgets of `bench`'s engine. `prompt_max` maps a plan data set source to its longest prompt;
    `capacity` is the system's accelerator_memory_capacity (default: the plan's description)."""
    workers = bench.engine.config().workers()
    facts = model_facts(bench, model_folder)
    text = capacity or plan.system(bench.system).description.get("accelerator_memory_capacity")
    out = Review(bench.key, facts, gpu_capacity(text))
    where = f"benchmarks[{bench.key}]"
    if any(w.on_gpu for w in workers):
        if facts.weight_bytes is None:
            out.notes.append(f"memory fit not checked: weights {facts.weight_source}")
        elif out.capacity is None:
            out.notes.append(f"memory fit not checked: GPU memory unknown ({text or 'not given'}); set systems["
                             f"{bench.system}].description.accelerator_memory_capacity, e.g. '186 GB'")
        else:
            out.fits = fits(workers, facts, out.capacity)
    declared = _bits(bench.model.weight_data_types)
    if model_folder and declared and (model_folder / "config.json").is_file() and checkpoint.tensors(model_folder):
        why = checkpoint.contradiction(declared[0], model_folder)
        if why:
            out.problems.append(
                f"{where}.model.weight_data_types: the plan declares {bench.model.weight_data_types!r}, but the "
                f"checkpoint in {model_folder} is not {declared[0]}: {why}\n  fix: point {where}.model.source at a "
                f"{declared[0]} checkpoint, or declare the weight type it holds")
    for row in out.fits:
        if not row.fits:
            out.problems.append(
                f"{where}: {row.worker.name} worker ({row.worker.count} x TP{row.worker.tp} x PP{row.worker.pp}) "
                f"holds {_gb(row.weights)} of weights per GPU ({facts.weight_source}); with the "
                f"{_gb(model_rules()['runtime_reserve_gib'] * _GIB)} runtime reserve that leaves {_gb(row.headroom)} "
                f"of the {_gb(row.usable)} it may use ({row.worker.memory_fraction:g} of {_gb(row.capacity)}), and "
                f"one sequence of KV cache needs {_gb(row.kv_min)}\n  fix: {_fit_fix(row, bench, facts)}")
    limits = [(w.max_len or facts.max_position, w.limit_field) for w in workers]
    if limits:
        limit, limit_field = min(limits, key=lambda x: x[0] if x[0] is not None else 1 << 62)
        for run, data, max_tokens in run_kinds(plan, bench, rules):
            got = (prompt_max or {}).get(data)
            out.budgets.append(Budget(run, data, max_tokens, got, limit, limit_field))
    short = [b for b in out.budgets if not b.ok]
    if short:
        worst = max(short, key=lambda b: b.need)
        prompt = f"the longest prompt of {worst.dataset} ({worst.prompt_max} tokens)" \
            if worst.prompt_max is not None else "at least one prompt token"
        runs = ", ".join(b.run for b in short)
        out.problems.append(
            f"{where}: {runs} runs need {worst.need} tokens ({prompt} + max_tokens {worst.max_tokens}), but "
            f"the engine is launched with {worst.limit_field.removeprefix('options.')} {worst.limit}: long answers "
            f"would be cut (TRT-LLM lowers max_tokens without an error) or refused\n  fix: set {where}.engine."
            f"{worst.limit_field} to at least {worst.need}, or lower the runs' max_tokens")
    if out.budgets and any(b.prompt_max is None for b in out.budgets):
        out.notes.append("prompt lengths are read from the staged data sets (preflight and launch); until then a "
                         "budget counts one prompt token")
    return out


def require(problems: list[str]) -> None:
    """Raise one PlanError naming every worker that cannot hold its share and every run whose budget is short (the
    problems of one or more reviews)."""
    if problems:
        raise PlanError("the plan does not fit its model, its hardware or its sequence budgets (`podium launch PLAN "
                        "--dry-run` prints the fit table):\n" + "\n".join(problems))


def render(r: Review) -> list[str]:
    """The fit table and the budgets, as the dry run and preflight print them."""
    lines = []
    if r.fits:
        lines.append(f"  memory fit on {_gb(r.fits[0].capacity)} GPUs (weights: {r.facts.weight_source}; runtime "
                     f"reserve {model_rules()['runtime_reserve_gib']} GiB per GPU):")
        lines.append(f"    {'worker':<12}{'GPUs':>10}{'weights/GPU':>14}{'KV room/GPU':>14}{'1 seq KV':>12}"
                     f"{'usable/GPU':>14}  verdict")
        for f in r.fits:
            w = f.worker
            gpus = f"{w.count}x{w.tp * w.pp}"
            lines.append(f"    {w.name:<12}{gpus:>10}{_gb(f.weights):>14}{_gb(f.headroom):>14}{_gb(f.kv_min):>12}"
                         f"{_gb(f.usable):>14}  {'fits' if f.fits else 'DOES NOT FIT'}")
    if r.budgets:
        lines.append("  sequence budgets (longest prompt + max_tokens <= the engine's limit):")
        for b in r.budgets:
            prompt = "?" if b.prompt_max is None else str(b.prompt_max)
            limit = "model's own (unknown)" if b.limit is None else f"{b.limit} ({b.limit_field})"
            lines.append(f"    {b.run:<12} prompt {prompt:>6} + {b.max_tokens:>6} = {b.need:>6} <= {limit}  "
                         f"{'ok' if b.ok else 'SHORT'}")
    lines += [f"  note: {n}" for n in r.notes]
    return lines
