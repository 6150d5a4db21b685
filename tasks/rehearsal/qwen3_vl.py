"""Qwen3-VL rehearsal data: the Shopify product catalogue's parquet schema (`tasks.datasets.shopify`) at its real row
counts: 48289 products (train+test, the rules' dataset size) and the 8000-product Interactive set, with small seeded
PNG images and known answers.

| file (as the plans name them) | rows |
|---|---|
| shopify_product_catalogue.parquet | 48289 (dataset size; performance and accuracy sample count) |
| shopify_product_catalogue_8k.parquet | 8000 (Interactive's data set), a seeded draw of the products above |

Each product's title carries its marker (`SKU-R0012345`), which every client copies into its prompt and by which the
simulated engine finds the answer: a JSON object with the category (right for `CATEGORY_RIGHT` of the products; a
sibling leaf, which the hierarchical F1 still credits up to the parent, otherwise), the brand and is_secondhand.
Categories are " > " paths of a seeded taxonomy; each product's candidates hold its true path. Images are 16 x 16
PNGs of seeded pixels: real counts, not real image bytes (a real product photo is far larger and gives the model
hundreds of visual tokens); titles and descriptions are seeded words of ASSUMED lengths.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

from submission.rules import load_rules
from tasks.engines.simulated.answers import ANSWER_TEXT, OUTPUT_TOKENS
from tasks.rehearsal.data import Built, lengths, scaled, write_table, write_tokenizer

BENCHMARK = "qwen3-vl-235b-a22b"
ROUND = "v6.1"
SEED = 62
FILES = {"performance": "shopify_product_catalogue.parquet", "Interactive": "shopify_product_catalogue_8k.parquet"}
CATEGORY_RIGHT, BRAND_RIGHT, SECONDHAND_RIGHT = 0.85, 0.9, 0.9
CANDIDATES = 5
IMAGE_SIDE = 16
DESCRIPTION_WORDS = (60.0, 0.6, 5, 400)   # ASSUMED: (mean, log-normal sigma, low, high), in words
OUTPUT = (40.0, 0.3, 20, 140)             # ASSUMED answer length in tokens, under the plans' max_tokens 150
ROOTS, CHILDREN, LEAVES = 16, 6, 5        # the seeded taxonomy: 16 x 6 x 5 = 480 three-level paths
# The stand-in model folder's tokenizer (the endpoints client counts prompt and answer tokens with it): bytes, with
# Qwen's chat markers as special tokens and a ChatML template that puts an image's placeholder where the image was.
CHAT_MARKERS = ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|endoftext|>")
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for part in m['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% else %}<|vision_start|><|image_pad|><|vision_end|>{% endif %}"
    "{% endfor %}{% endif %}{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "da", "fe", "go", "hu", "ji", "pe", "zo", "ba")


def _word(rng: np.random.Generator) -> str:
    return "".join(SYLLABLES[i] for i in rng.integers(0, len(SYLLABLES), int(rng.integers(2, 5))))


def _taxonomy(rng: np.random.Generator) -> list[list[list[str]]]:
    """paths[root][child][leaf] = "Root > Child > Leaf"."""
    tree = []
    for r in range(ROOTS):
        root = f"{_word(rng).title()} {r}"
        tree.append([[f"{root} > {_word(rng).title()} {c} > {_word(rng).title()} {leaf}" for leaf in range(LEAVES)]
                     for c in range(CHILDREN)])
    return tree


def _png(pixels: np.ndarray) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, format="PNG")
    return out.getvalue()


def _products(rng: np.random.Generator, count: int) -> dict[str, list]:
    tree = _taxonomy(rng)
    brands = [_word(rng).title() for _ in range(200)]
    vocabulary = [_word(rng) for _ in range(2000)]
    words = lengths(rng, count, *DESCRIPTION_WORDS)
    outputs = lengths(rng, count, *OUTPUT)
    pixels = rng.integers(0, 256, size=(count, IMAGE_SIDE, IMAGE_SIDE, 3), dtype=np.uint8)
    cols: dict[str, list] = {k: [] for k in ("product_title", "product_description", "potential_product_categories",
                                             "product_image", "ground_truth_category", "ground_truth_brand",
                                             "ground_truth_is_secondhand", ANSWER_TEXT)}
    right = rng.random((count, 3)) < (CATEGORY_RIGHT, BRAND_RIGHT, SECONDHAND_RIGHT)
    for i in range(count):
        r, c, leaf = int(rng.integers(ROOTS)), int(rng.integers(CHILDREN)), int(rng.integers(LEAVES))
        truth = tree[r][c][leaf]
        others = [p for row in tree[r] for p in row if p != truth]
        picks = [others[int(j)] for j in rng.choice(len(others), CANDIDATES - 1, replace=False)]
        brand, used = brands[int(rng.integers(len(brands)))], bool(rng.random() < 0.2)
        text = " ".join(vocabulary[int(j)] for j in rng.integers(0, len(vocabulary), int(words[i])))
        answer = {"category": truth if right[i, 0] else tree[r][c][(leaf + 1) % LEAVES],
                  "brand": brand if right[i, 1] else f"{brand} Co", "is_secondhand": used == bool(right[i, 2])}
        cols["product_title"].append(f"{_word(rng).title()} {_word(rng)} {brand} SKU-R{i:07d}")
        cols["product_description"].append(text)
        cols["potential_product_categories"].append(sorted([truth, *picks]))
        cols["product_image"].append({"bytes": _png(pixels[i]), "path": f"product-{i:07d}.png"})
        cols["ground_truth_category"].append(truth)
        cols["ground_truth_brand"].append(brand)
        cols["ground_truth_is_secondhand"].append(used)
        cols[ANSWER_TEXT].append(json.dumps(answer))
    return {**cols, OUTPUT_TOKENS: outputs}


def _columns(data: dict[str, list], rows: np.ndarray | None = None) -> dict:
    import pyarrow as pa

    pick = (lambda values: values) if rows is None else (lambda values: [values[int(i)] for i in rows])
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    types = {"potential_product_categories": pa.list_(pa.string()), "product_image": image,
             "ground_truth_is_secondhand": pa.bool_(), OUTPUT_TOKENS: pa.int32()}
    return {name: pa.array(pick(list(values)), type=types.get(name, pa.string())) for name, values in data.items()}


def build(out: Path, *, scale: float = 1.0) -> Built:
    bench = load_rules(ROUND).benchmark(BENCHMARK)
    interactive = bench.scenario("Interactive").dataset
    count = scaled(bench.dataset.size, scale)
    subset = scaled(interactive.size if interactive else 8000, scale)
    rng = np.random.default_rng(SEED)
    data = _products(rng, count)
    full = write_table(_columns(data), out / FILES["performance"])
    rows = np.sort(rng.choice(count, size=min(subset, count), replace=False))
    small = write_table(_columns(data, rows), out / FILES["Interactive"])
    tokenizer = write_tokenizer(out / "model", CHAT_MARKERS, CHAT_TEMPLATE)
    return Built(
        benchmark=BENCHMARK, root=str(out), seed=SEED, scale=scale,
        plan={"dataset.performance": str(full), "dataset.accuracy": str(full),
              "dataset.scenarios.Interactive": str(small), "model.source": str(tokenizer.parent)},
        answers=(str(full),),   # the 8k set's products are rows of the full set: one book answers both
        rows={FILES["performance"]: count, FILES["Interactive"]: len(rows)},
        real=("row counts (48289; 8000 for Interactive) and the catalogue's columns",
              "scoring: the real hierarchical-F1 evaluator against the targets"),
        not_real=("image bytes: 16 x 16 seeded PNGs, not product photos (visual token counts are not real)",
                  "titles, descriptions and the category taxonomy: seeded words, assumed lengths",
                  "answer lengths: an assumed distribution (mean 40 tokens)",
                  "answers: known to the simulated engine, right at set rates; no model ran",
                  "tokens: a byte-level tokenizer with Qwen's chat markers, not Qwen3-VL's (token counts are bytes)"),
        extra={"tokenizer": str(tokenizer)})
