"""The official MLCommons reference evaluators, run as child processes on a test's files, so that tests assert
Podium's scores equal theirs instead of pinning numbers by hand. The sources are the `inference_src` fixture's
(mlcommons/inference at the round's pin); their Python dependencies come with the dev extra (pyproject.toml).

- gpt-oss-120b: `language/gpt-oss-120b/eval_mlperf_accuracy.py`, run as its README runs it, with `--output-file`
  for the summary at full precision; the line it prints for the checker (`'exact_match': 59.091`) is kept too.
  LiveCodeBench rows need its LiveCodeBench submodule, which the round's sources do not hold: AIME and GPQA only.
- Qwen3-VL: `evaluation.py` `run_evaluation` through a shim of a few lines (the package's CLI needs pydantic-typer
  from a git URL, only to parse its arguments), with `os.cpu_count` reading 4 there, so its chunks, and the random
  draws for rejected answers, are those of a machine with at least 4 CPUs (Podium's `chunk_workers`); the data set
  is read by `datasets.load_dataset` from a local folder, offline. It runs on Podium's Python (3.11): the package asks
  for 3.12, the two modules the shims import need nothing newer.
- deepseek-r1: `language/deepseek-r1/eval_accuracy.py` run as its README runs it (`--input-file` the log,
  `--dataset-file` the pickle), from a folder of the test's where `eval_accuracy.py` is a link to the round's script
  and `submodules/prm800k/prm800k` a link to the fetched grader's (the two paths it resolves from its own file), its
  tokenizer (`deepseek-ai/DeepSeek-R1` at the revision it pins) an offline Hugging Face cache of the test's tokenizer.
  Its LiveCodeBench rows need its LiveCodeBench submodule, which the round's sources do not hold (each such row
  scores 0 there): give it logs without them.
- The Qwen3-VL answer schema (`schema.ProductMetadata.model_validate_json` on each text) and the category rule
  (`get_hierarchical_components`), through shims too.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 300
GPT_OSS = Path("language") / "gpt-oss-120b" / "eval_mlperf_accuracy.py"
DEEPSEEK_R1 = Path("language") / "deepseek-r1" / "eval_accuracy.py"
DEEPSEEK_CHECKPOINT = ("deepseek-ai/DeepSeek-R1", "56d4cbbb4d29f4355bab4b9a39ccb717a14ad5ad")   # eval_accuracy.py
QWEN3_VL = Path("multimodal") / "qwen3-vl" / "src"

_QWEN3_VL_EVALUATE = """
import os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
os.cpu_count = lambda: 4
from mlperf_inf_mm_q3vl.evaluation import run_evaluation
from mlperf_inf_mm_q3vl.schema import Dataset
run_evaluation(random_seed=int(sys.argv[4]), filename=Path(sys.argv[2]), dataset=Dataset(repo_id=sys.argv[3],
               split=["train"]))
"""
_DEEPSEEK_PARSE_CODE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("eval_accuracy", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(json.dumps([module.parse_code(text) for text in json.load(sys.stdin)]))
"""
_QWEN3_VL_SCHEMA = """
import json, sys
sys.path.insert(0, sys.argv[1])
from pydantic import ValidationError
from mlperf_inf_mm_q3vl.schema import ProductMetadata
out = []
for text in json.load(sys.stdin):
    try:
        m = ProductMetadata.model_validate_json(text)
        out.append([m.category, m.brand, m.is_secondhand])
    except ValidationError:
        out.append(None)
print(json.dumps(out))
"""
_QWEN3_VL_COMPONENTS = """
import json, sys
sys.path.insert(0, sys.argv[1])
from mlperf_inf_mm_q3vl.evaluation import get_hierarchical_components
from mlperf_inf_mm_q3vl.schema import ProductMetadata
print(json.dumps(get_hierarchical_components(ProductMetadata.model_validate_json(sys.argv[2]).category, sys.argv[3])))
"""


def run(argv: list[str], work: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a reference in `work` (they write there), offline, its caches there too; fail naming its output."""
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HOME": str(work / "hf-home"), "HF_DATASETS_CACHE": str(work / "hf-datasets"),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TQDM_DISABLE": "1"}
    done = subprocess.run(argv, cwd=work, env=env, input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S,
                          check=False)
    assert done.returncode == 0, f"reference {argv[:3]} exited {done.returncode}:\n{done.stdout[-3000:]}\n" \
                                 f"{done.stderr[-3000:]}"
    return done


@dataclass(frozen=True)
class GptOssReference:
    summary: dict       # the --output-file summary: final_score_percentage, per_dataset {correct, total, repeats}
    printed: str        # the line printed for the submission checker


def gpt_oss(src: Path, log: Path, data: Path, tokenizer_dir: Path, work: Path) -> GptOssReference:
    """eval_mlperf_accuracy.py on `log` against `data` (parquet), the tokenizer folder as its `--tokenizer`."""
    out = work / "reference.json"
    done = run([sys.executable, str(src / GPT_OSS), "--mlperf-log", str(log), "--reference-data", str(data),
                 "--tokenizer", str(tokenizer_dir), "--output-file", str(out)], work)
    printed = re.findall(r"^'exact_match': [\d.]+$", done.stdout, re.MULTILINE)
    assert len(printed) == 1, done.stdout[-2000:]
    return GptOssReference(json.loads(out.read_text())["summary"], printed[0])


def gpt_oss_command(src: Path, data: Path, tokenizer_dir: Path) -> str:
    """eval_mlperf_accuracy.py as TEST07's `--accuracy-script` (compliance/TEST07/README.md), `{accuracy_log}` left for
    the script to fill in."""
    return shlex.join([sys.executable, str(src / GPT_OSS), "--mlperf-log", "{accuracy_log}", "--reference-data",
                       str(data), "--tokenizer", str(tokenizer_dir)])


@dataclass(frozen=True)
class Qwen3VLReference:
    accuracy_txt: str               # the file run_evaluation writes (`Results`, `{"f1": ...}`, `hash=...`)
    table: dict[str, str]           # the printed "From accuracy file" row: column name -> the number as printed
    rejected: int                   # "N responses cannot be parsed against the expected schema"
    drawn: list[tuple[int, bool]]   # (qsl_idx, is_secondhand drawn for it) of each rejected answer, in log order


def qwen3_vl(src: Path, log: Path, data: Path, work: Path, seed: int = 12345) -> Qwen3VLReference:
    """run_evaluation on `log` against the folder `data` (`data/train-*.parquet`, the Shopify schema)."""
    done = run([sys.executable, "-c", _QWEN3_VL_EVALUATE, str(src / QWEN3_VL), str(log), str(data), str(seed)], work)
    output = done.stdout + done.stderr
    header = next(line for line in output.splitlines() if "Category hierarchical F1 Score" in line)
    row = next(line for line in output.splitlines() if line.startswith("│ From accuracy file"))
    names, values = ([c.strip() for c in line.strip("│").split("│")] for line in (header, row))
    drawn = re.findall(r"at index (\d+)\)cannot be validated against the expected schema\. Overwriting this response "
                       r"into .*?is_secondhand=(True|False)", output)
    rejected = re.search(r"(\d+) responses cannot be parsed against the expected schema", output)
    assert rejected is not None, output[-2000:]
    return Qwen3VLReference((work / "accuracy.txt").read_text(), dict(zip(names[1:], values[1:], strict=True)),
                            int(rejected.group(1)), [(int(i), v == "True") for i, v in drawn])


def qwen3_vl_schema(src: Path, texts: list[str], work: Path) -> list[tuple[str, str, bool] | None]:
    """ProductMetadata.model_validate_json on each text: its (category, brand, is_secondhand), or None if rejected."""
    done = run([sys.executable, "-c", _QWEN3_VL_SCHEMA, str(src / QWEN3_VL)], work, stdin=json.dumps(texts))
    return [None if v is None else tuple(v) for v in json.loads(done.stdout)]


def qwen3_vl_components(src: Path, answer: str, truth: str, work: Path) -> tuple[int, int, int]:
    """evaluation.py `get_hierarchical_components` of a valid answer's category against `truth`: (intersection,
    predicted length, true length)."""
    done = run([sys.executable, "-c", _QWEN3_VL_COMPONENTS, str(src / QWEN3_VL), answer, truth], work)
    return tuple(json.loads(done.stdout))


@dataclass(frozen=True)
class DeepSeekReference:
    printed: str                    # the results line it prints ({'exact_match': ..., 'tokens_per_sample': ...})
    per_subset: dict[str, float]    # each `dataset` value's mean prompt_accuracy, from the evaluated pickle it saves
    rows: int


def deepseek_r1(src: Path, grader: Path, log: Path, data: Path, tokenizer_dir: Path, work: Path) -> DeepSeekReference:
    """eval_accuracy.py on `log` against the pickle `data`, MATH-500 through the grader in `grader` (openai/prm800k's
    root), decoding with the tokenizer files of `tokenizer_dir` served from an offline cache as the checkpoint."""
    import pandas as pd

    repo, revision = DEEPSEEK_CHECKPOINT
    snapshot = work / "hf-home" / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (snapshot / name).write_bytes((tokenizer_dir / name).read_bytes())
    (snapshot / "config.json").write_text('{"model_type": "deepseek_v3"}\n')   # AutoTokenizer reads the model type
    script = work / "reference" / "eval_accuracy.py"
    (script.parent / "submodules" / "prm800k").mkdir(parents=True, exist_ok=True)
    script.symlink_to(src / DEEPSEEK_R1)
    (script.parent / "submodules" / "prm800k" / "prm800k").symlink_to(grader.resolve() / "prm800k")
    out = work / "reference_evaluated.pkl"   # a name it keeps (it appends _evaluated.pkl to any other)
    done = run([sys.executable, str(script), "--input-file", str(log), "--dataset-file", str(data), "--output-file",
                str(out)], work)
    printed = re.findall(r"^\{'exact_match': .*\}$", done.stdout, re.MULTILINE)
    assert len(printed) == 1, done.stdout[-2000:]
    frame = pd.read_pickle(out)
    per = frame.groupby("dataset")["prompt_accuracy"].mean()
    return DeepSeekReference(printed[0], {str(k): float(v) for k, v in per.items()}, len(frame))


def deepseek_r1_code(src: Path, texts: list[str], work: Path) -> list[str | None]:
    """eval_accuracy.py `parse_code` of each text (the program its LiveCodeBench grading would run)."""
    done = run([sys.executable, "-c", _DEEPSEEK_PARSE_CODE, str(src / DEEPSEEK_R1)], work, stdin=json.dumps(texts))
    return json.loads(done.stdout.strip().splitlines()[-1])
