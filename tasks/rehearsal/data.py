"""Synthetic full-size data sets for the dress rehearsal: the reference's row counts and file schemas, seeded and
deterministic, built once into a folder laid out like the real download, with known answers the simulated engine
serves (`tasks.engines.simulated.answers`) and the real evaluators score above the accuracy targets.

    built = build("gpt-oss-120b", Path("rehearsal-data"))       # or `podium dev rehearsal-data --benchmark ...`
    built.plan          # plan field under the benchmark -> local path, to put in place of the plan's own
    built.answers       # the data sets the simulated engine is given (its `answers` option)

What is real and what is not is said in `Built.not_real` (and in the folder's `rehearsal.json`): counts, schemas,
subset mix, output lengths where the reference publishes them, and the scoring are real; prompt text, prompt token
ids and image bytes are not. `scale` < 1 builds the same files with fewer rows (tests), through the same code.
"""

from __future__ import annotations

import importlib
import json
import resource
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from submission.base.errors import PlanError, did_you_mean
from submission.base.files import replace_atomic, temporary, write_atomic

MANIFEST = "rehearsal.json"
BUILDERS = {"gpt-oss-120b": "tasks.rehearsal.gpt_oss", "qwen3-vl-235b-a22b": "tasks.rehearsal.qwen3_vl",
            "deepseek-r1": "tasks.rehearsal.deepseek_r1"}
NOTICE = "SYNTHETIC REHEARSAL DATA: not the MLCommons data set; never a benchmark result"
ANSWERS_SUFFIX = ".rehearsal.parquet"   # beside a data set that is no parquet file: the answers it is served with


@dataclass(frozen=True)
class Built:
    """What a build left in `root` (paths are absolute)."""

    benchmark: str
    root: str
    seed: int
    scale: float
    plan: dict[str, str]                  # plan field under the benchmark (dataset.performance, ...) -> path
    answers: tuple[str, ...]              # data sets the simulated engine answers from (its `answers` option)
    rows: dict[str, int]                  # file, relative to root -> rows
    real: tuple[str, ...]                 # what matches the reference
    not_real: tuple[str, ...]             # what does not, said on every report that uses the data
    extra: dict[str, str] = field(default_factory=dict)   # other files: tokenizer, LiveCodeBench tests

    def manifest(self) -> dict[str, Any]:
        return {"notice": NOTICE, **asdict(self)}


def answers_file(dataset: str) -> str:
    """The parquet file whose `rehearsal_*` columns serve `dataset`: the data set itself when it is parquet, else the
    file beside it named with ANSWERS_SUFFIX (deepseek-r1's pickle)."""
    return dataset if dataset.endswith(".parquet") else dataset + ANSWERS_SUFFIX


def scaled(count: int, scale: float) -> int:
    """`count` rows at `scale`, never fewer than one."""
    return max(1, round(count * scale))


def lengths(rng: np.random.Generator, count: int, mean: float, sigma: float, low: int, high: int) -> np.ndarray:
    """`count` token lengths, log-normal with shape `sigma`, clipped to [low, high], their mean brought to `mean`
    (within half a token where the bounds allow it): int32."""
    if count <= 0:
        return np.zeros(0, dtype=np.int32)
    raw = rng.lognormal(np.log(mean) - sigma ** 2 / 2, sigma, count)
    values = np.clip(raw, low, high)
    for _ in range(20):   # rescale the unclipped part until the clipped mean settles
        values = np.clip(values * (mean / values.mean()), low, high)
        if abs(values.mean() - mean) < 0.05:
            break
    out = np.round(values).astype(np.int32)
    short = round(mean * count) - int(out.sum())   # spread the rounding error one token at a time
    if short:
        room = np.flatnonzero(out < high) if short > 0 else np.flatnonzero(out > low)
        take = room[:abs(short)]
        out[take] += 1 if short > 0 else -1
    return out


def token_column(rows: list[np.ndarray]) -> Any:
    """A list<int32> arrow column from int arrays, built from one flat buffer (millions of tokens, no Python ints)."""
    import pyarrow as pa

    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    values = np.concatenate(rows).astype(np.int32) if rows else np.zeros(0, dtype=np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


def write_table(columns: dict[str, Any], path: Path, metadata: dict[str, Any] | None = None) -> Path:
    """A parquet file of `columns`, atomically; `metadata` goes into the schema's key-value metadata as JSON."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(columns)
    if metadata:
        table = table.replace_schema_metadata({k: json.dumps(v) for k, v in metadata.items()})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary(path)
    pq.write_table(table, tmp)
    return replace_atomic(tmp, path)


def _byte_chars() -> list[str]:
    """The printable character byte-level BPE uses for each byte value (the GPT-2 mapping), index = byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def write_tokenizer(folder: Path, specials: tuple[str, ...] = (), chat_template: str | None = None, *,
                    added: tuple[str, ...] = (), config: dict[str, Any] | None = None) -> Path:
    """A byte-level tokenizer whose token id is the byte value (0-255), `specials` 256 on, then `added` (tokens that
    decoding keeps, as DeepSeek-R1's `<think>`); `folder` gets tokenizer.json and a tokenizer_config.json (what
    AutoTokenizer, the loader of the evaluators and of the endpoints client, needs; the client refuses a model folder
    without them), with `chat_template` and the entries of `config` when given."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(_byte_chars())}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(specials))
    tok.add_tokens(list(added))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", **(config or {})}
    if chat_template:
        config["chat_template"] = chat_template
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / "tokenizer.json", tok.to_str())
    write_atomic(folder / "tokenizer_config.json", json.dumps(config) + "\n")
    return folder / "tokenizer.json"


def _builder(benchmark: str) -> Callable[..., Built]:
    if benchmark not in BUILDERS:
        raise PlanError(f"no synthetic rehearsal data for benchmark {benchmark!r}",
                        fix=did_you_mean(benchmark, BUILDERS))
    return importlib.import_module(BUILDERS[benchmark]).build


def build(benchmark: str, out: Path, *, scale: float = 1.0) -> Built:
    """Build `benchmark`'s data sets into `out` (files replaced atomically) and write `out/rehearsal.json`."""
    if not 0 < scale <= 1:
        raise PlanError(f"scale {scale} is not in (0, 1]", fix="1 builds the full size; less builds fewer rows")
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    built = _builder(benchmark)(out, scale=scale)
    write_atomic(out / MANIFEST, json.dumps(built.manifest(), indent=2) + "\n")
    return built


def load(out: Path) -> Built:
    """The build recorded in `out/rehearsal.json`."""
    path = Path(out) / MANIFEST
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise PlanError(f"no rehearsal data manifest: {e}", where=str(path),
                        fix="build it with `podium dev rehearsal-data --benchmark BENCHMARK --out FOLDER`") from None
    data.pop("notice", None)
    return Built(**{**data, "answers": tuple(data["answers"]), "real": tuple(data["real"]),
                    "not_real": tuple(data["not_real"])})


def measured_build(benchmark: str, out: Path, *, scale: float = 1.0) -> dict[str, Any]:
    """`build`, with what it cost: wall seconds, bytes on disk, rows, and the process's peak resident memory (MiB;
    the whole process's, so run it in a fresh one for a figure of the build alone)."""
    started = time.perf_counter()
    built = build(benchmark, out, scale=scale)
    seconds = time.perf_counter() - started
    root = Path(built.root)
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # Linux: KiB
    return {"benchmark": benchmark, "root": built.root, "scale": scale, "rows": built.rows,
            "build_s": round(seconds, 2), "bytes": size, "peak_rss_mib": round(peak_mib, 1),
            "plan": built.plan, "answers": list(built.answers), "not_real": list(built.not_real)}
