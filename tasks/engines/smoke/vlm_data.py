"""The VLM smoke data set: products in the Shopify catalogue's parquet schema, with seeded PNG images and the tiny
LLaVA's own greedy answers as references.

Columns are the real ones (`product_title`, `product_description`, `potential_product_categories`,
`product_image` as the Hugging Face Image struct {bytes, path}, `ground_truth_category`, `ground_truth_brand`,
`ground_truth_is_secondhand`) plus `reference_answer`: the answer `model.generate` gives offline to exactly the
chat request the Qwen3-VL request builder sends, preprocessed the way `transformers serve` preprocesses it. The
served answers must equal them (smoke-vlm-exact-match); since every image differs, a request whose image was
lost or altered on the way answers differently. The tiny model writes no JSON, so the Qwen3-VL evaluator scores
these answers as unparsable (hierarchical F1 0).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from submission.base.files import replace_atomic, temporary
from tasks.engines.smoke.model import CORPUS

SEED = 2
FILE = "shopify_smoke.parquet"
TAXONOMY = (
    "Home & Garden > Lighting > Lamps",
    "Home & Garden > Kitchen > Cookware",
    "Apparel & Accessories > Shoes > Boots",
    "Apparel & Accessories > Bags > Backpacks",
    "Electronics > Audio > Headphones",
    "Sporting Goods > Cycling > Helmets",
)
BRANDS = ("Northwind", "Fabrikam", "Contoso", "Tailspin")


def _png(rng: np.random.Generator) -> bytes:
    from PIL import Image

    pixels = rng.integers(0, 256, size=(24, 32, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, format="PNG")
    return out.getvalue()


def _rows(count: int, rng: np.random.Generator) -> list[dict]:
    words = CORPUS.read_text().split()
    rows = []
    for i in range(count):
        start = int(rng.integers(0, len(words) - 30))
        truth = TAXONOMY[i % len(TAXONOMY)]
        others = [c for c in TAXONOMY if c != truth]
        picks = [others[int(j)] for j in rng.choice(len(others), size=2, replace=False)]
        candidates = sorted([truth, *picks])
        rows.append({
            "product_title": " ".join(words[start:start + 4]),
            "product_description": " ".join(words[start + 4:start + 24]),
            "potential_product_categories": candidates,
            "product_image": {"bytes": _png(rng), "path": f"product-{i}.png"},
            "ground_truth_category": truth,
            "ground_truth_brand": BRANDS[i % len(BRANDS)],
            "ground_truth_is_secondhand": bool(i % 3 == 0),
        })
    return rows


def _references(model_dir: Path, data: Path, max_tokens: int) -> list[str]:
    """Greedy answers made offline, from the exact bodies the request builder sends."""
    import torch
    from transformers import AutoProcessor, LlavaForConditionalGeneration
    from transformers.cli.serving.utils import BaseHandler, Modality

    from tasks.datasets.requests import build_requests

    builder = build_requests("qwen3-vl-235b-a22b", data, "accuracy", max_tokens=max_tokens, temperature=0.0)
    processor = AutoProcessor.from_pretrained(model_dir)
    model = LlavaForConditionalGeneration.from_pretrained(model_dir).eval()
    answers = []
    with torch.no_grad():
        for i in range(len(builder)):
            messages = BaseHandler.get_processor_inputs_from_messages(builder.body(i)["messages"], Modality.VLM)
            inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                   return_dict=True, return_tensors="pt")
            out = model.generate(**inputs, max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False)
            answers.append(processor.tokenizer.decode(out[0][inputs["input_ids"].shape[1]:].tolist(),
                                                      skip_special_tokens=True))
    return answers


def build(model_dir: Path, out_dir: Path, *, count: int = 8, max_tokens: int = 8) -> Path:
    """Write the parquet file (atomically) and return its path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir.mkdir(parents=True, exist_ok=True)
    rows = _rows(count, np.random.default_rng(SEED))
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    schema = pa.schema([("product_title", pa.string()), ("product_description", pa.string()),
                        ("potential_product_categories", pa.list_(pa.string())), ("product_image", image),
                        ("ground_truth_category", pa.string()), ("ground_truth_brand", pa.string()),
                        ("ground_truth_is_secondhand", pa.bool_())])
    tmp = temporary(out_dir / FILE)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)
    references = _references(model_dir, tmp, max_tokens)
    table = pq.read_table(tmp).append_column("reference_answer", pa.array(references, pa.string()))
    pq.write_table(table, tmp)
    return replace_atomic(tmp, out_dir / FILE)
