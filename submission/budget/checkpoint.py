"""What a staged checkpoint holds: its tensors by part (rules/models.yaml `tensor_parts`) and the weight type its
quantization config and tensors say, against the plan's `model.weight_data_types`.

The engines read the type from the checkpoint itself (vLLM: config.json `quantization_config`, else ModelOpt's
hf_quant_config.json, vllm/transformers_utils/config.py:923-935 at 0.31.0), so a plan that declares NVFP4 over a BF16
folder is sized at a quarter of what the engine will load, and a submission would report weights it did not run.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The types a declared word accepts; every unquantized float counts as one (an engine casts among them at load).
_FLOAT = {"bf16", "fp16", "fp32"}
_ACCEPTS = {"fp4": {"nvfp4", "mxfp4"}, **{t: _FLOAT for t in _FLOAT}}

# Bits of each safetensors dtype's element (a U8 of a 4-bit checkpoint packs two values).
_DTYPE_BITS = {"F64": 64, "F32": 32, "BF16": 16, "F16": 16, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "I64": 64,
               "I32": 32, "I16": 16, "I8": 8, "U8": 8, "BOOL": 8}


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str
    nbytes: int


def tensors(folder: Path) -> list[Tensor]:
    """Every tensor of a folder's safetensors files, from their headers (8-byte length, then JSON)."""
    out = []
    for path in sorted(folder.glob("*.safetensors")):
        with path.open("rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        out += [Tensor(name, t["dtype"], t["data_offsets"][1] - t["data_offsets"][0])
                for name, t in header.items() if name != "__metadata__"]
    return out


def part_of(name: str, patterns: dict[str, str]) -> str:
    return next((part for part, pattern in patterns.items() if re.search(pattern, name)), "other")


def part_bytes(found: list[Tensor], patterns: dict[str, str]) -> dict[str, float]:
    out: Counter[str] = Counter()
    for t in found:
        out[part_of(t.name, patterns)] += t.nbytes
    return {part: float(n) for part, n in out.items()}


def quantization_config(folder: Path) -> dict[str, Any] | None:
    """config.json's quantization_config (a VLM's may sit in text_config), else hf_quant_config.json's, as vLLM."""
    config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
    found = config.get("quantization_config") or config.get("text_config", {}).get("quantization_config")
    legacy = folder / "hf_quant_config.json"
    if found is None and legacy.is_file():
        found = json.loads(legacy.read_text())
    return found


def config_type(qc: dict[str, Any] | None) -> str:
    """The weight type a quantization config names: ModelOpt `quant_algo` (NVFP4, FP8, MXFP4...; modelopt.py),
    compressed-tensors `format` (nvfp4-pack-quantized, float-quantized, pack-quantized), or `quant_method` (mxfp4,
    fp8, awq, gptq); no config: unquantized."""
    if not qc:
        return "unquantized"
    algo = str((qc.get("quantization") or qc).get("quant_algo") or "").lower()
    method = str(qc.get("quant_method") or "").lower()
    formats = [str(qc.get("format") or "")] + [str(g.get("format") or "") for g in
                                               (qc.get("config_groups") or {}).values() if isinstance(g, dict)]
    words = " ".join([algo, method, *formats]).lower()
    for kind, marks in (("nvfp4", ("nvfp4",)), ("mxfp4", ("mxfp4",)), ("fp8", ("fp8", "float-quantized")),
                        ("int4", ("awq", "gptq", "w4a16", "int4", "pack-quantized")), ("int8", ("int8", "w8a8"))):
        if any(m in words for m in marks):
            return kind
    return f"unknown ({method or algo or 'no quant_method'})"


def tensor_type(found: list[Tensor]) -> str:
    """The weight type the tensors imply, by the dtype holding most bytes: U8 packs 4-bit values (NVFP4 with FP8
    block scales, MXFP4 with U8 ones), F8 is FP8, I8 INT8, I32 packed INT4 (AWQ, GPTQ), a float dtype an
    unquantized checkpoint."""
    by_dtype: Counter[str] = Counter()
    for t in found:
        by_dtype[t.dtype] += t.nbytes
    if not by_dtype:
        return "unknown (no tensors)"
    top = by_dtype.most_common(1)[0][0]
    if top == "U8":
        return "nvfp4" if by_dtype["F8_E4M3"] else "mxfp4"
    return {"F8_E4M3": "fp8", "F8_E5M2": "fp8", "I8": "int8", "I32": "int4", "BF16": "bf16", "F16": "fp16",
            "F32": "fp32"}.get(top, f"unknown ({top})")


def bits_per_parameter(found: list[Tensor]) -> float:
    """Stored bits per weight value: 4-bit values counted two to a U8; the bytes of the scales and of the 16-bit
    parts included, their values not (a scale tensor's name says scale)."""
    values = sum(t.nbytes * 8 // _DTYPE_BITS.get(t.dtype, 8) * (2 if t.dtype == "U8" else 1)
                 for t in found if "scale" not in t.name)
    return sum(t.nbytes for t in found) * 8 / values if values else 0.0


def contradiction(declared: str, folder: Path) -> str | None:
    """Why the checkpoint in `folder` is not of the `declared` type (a word of model.weight_data_types), or None."""
    found = tensors(folder)
    from_config, from_tensors = config_type(quantization_config(folder)), tensor_type(found)
    accepted = _ACCEPTS.get(declared, {declared})
    config_ok = from_config in accepted or (from_config == "unquantized" and accepted == _FLOAT)
    if config_ok and from_tensors in accepted:
        return None
    shares = Counter({t.dtype: 0 for t in found})
    for t in found:
        shares[t.dtype] += t.nbytes
    total = sum(shares.values()) or 1
    dtypes = ", ".join(f"{n / total:.0%} {d}" for d, n in shares.most_common(3))
    return (f"its quantization config says {from_config} and its tensors {from_tensors} ({dtypes} of the bytes, "
            f"{bits_per_parameter(found):.2f} bits per parameter)")
