"""The staged Shopify product catalogue in the endpoints client's own layout.

The client reads its predefined Shopify sets only from a cache under its working folder,
`dataset_cache/<id>/<split>/<id>_<split>.parquet` (its `datasets_dir` cannot be given from the CLI or YAML), and
downloads from the hub when the file is missing; the file holds the columns its Shopify loader writes
(dataset_manager/predefined/shopify_product_catalogue/__init__.py `_process_sample_to_row`): the image as base64 with
its format, the candidate categories and `ground_truth_is_secondhand` as JSON strings.

    convert(staged_parquet, out_file)                    # once per data set (the images are re-encoded as base64 text,
                                                         # their bytes unchanged)
    place(out_file, run_dir, "shopify_product_catalogue", "train+test")   # a link where the client looks
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from submission.base.errors import PlanError
from submission.base.files import replace_atomic, temporary
from tasks.datasets.shopify import read_products

CACHE = "dataset_cache"


def cache_file(run_dir: Path, dataset_id: str, split: str) -> Path:
    """Where the client looks for the data set `dataset_id` (split key `split`) when it runs in `run_dir`."""
    return run_dir / CACHE / dataset_id / split / f"{dataset_id}_{split}.parquet"


def convert(source: Path, out: Path) -> Path:
    """Write the staged Shopify parquet file (or folder of shards) `source` as the client's cache file `out`,
    atomically; rows keep their order, images their bytes (their format is PIL's name, as the client's own writes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    has_truth = "ground_truth_category" in _columns(source)
    products = read_products(source, accuracy=has_truth).products
    rows = [{"product_title": p.title, "product_description": p.description,
             "product_image_base64": base64.b64encode(p.image).decode("ascii"),
             "product_image_format": p.image_format.upper(),
             "potential_product_categories": json.dumps(list(p.categories)),
             "ground_truth_category": p.category or "", "ground_truth_brand": p.brand or "",
             "ground_truth_is_secondhand": json.dumps(bool(p.is_secondhand))} for p in products]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary(out)
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    return replace_atomic(tmp, out)


def place(converted: Path, run_dir: Path, dataset_id: str, split: str, *, rows: int | None = None,
          source: str | None = None) -> Path:
    """Link the converted file where the client run in `run_dir` reads `dataset_id`; with `rows`, the file must hold
    exactly that many (the rules' size: the client's performance sample count is the data set's row count).
    `source`: the staged data set it was converted from, named in the error."""
    import pyarrow.parquet as pq

    found = pq.ParquetFile(converted).metadata.num_rows
    if rows is not None and found != rows:
        raise PlanError(f"the {dataset_id} data set has {found} rows; the round's rules require {rows}",
                        where=source or str(converted), fix="stage the full data set the rules name (train+test "
                        "of Shopify/product-catalogue, or the 8k set for Interactive)")
    link = cache_file(run_dir, dataset_id, split)
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(converted.resolve(), link)
    return link


def _columns(source: Path) -> set[str]:
    import pyarrow.parquet as pq

    first = source if source.is_file() else next(iter(sorted(source.rglob("*.parquet"))), None)
    return set(pq.read_schema(first).names) if first else set()
