"""Known-answer Qwen3-VL cases (tricky answer formats), shared by the evaluator tests. The tests score them with Podium
and with mlcommons/inference `multimodal/qwen3-vl/.../evaluation.py` `run_evaluation` at the round's pin
(tests/references.py: random_seed 12345, 4 chunk workers) and assert they agree."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.accuracy_logs import write_log


def _answer(category: str, brand: str = "Acme", secondhand: bool = False, **extra: object) -> bytes:
    return json.dumps({"category": category, "brand": brand, "is_secondhand": secondhand, **extra}).encode()


CATS = ["A > B > C", "A > B > D", "E > F"]
ROWS = [  # (true category, true brand, true is_secondhand, answer bytes)
    ("A > B > C", "Acme", False, _answer("A > B > C")),                                      # exact
    ("A > B > C", "Acme", True, _answer("A > B > C", confidence=0.9)),                       # extra key: rejected
    ("A > B > D", "Abercrombie & Fitch", True, _answer("A > B > D", "Abercromebei & Fitch", True)),  # fuzzy brand
    ("E > F", "Acme", False, b'{"category": "E > F", "brand": null, "is_secondhand": false}'),   # null: rejected
    ("E > F", "Acme", True, b'```json\n{"category": "E > F", "brand": "Acme", "is_secondhand": true}\n```'),  # fence
    ("A > B > C", "Acme", False,
     b'{"category": "E > F", "brand": "Acme", "is_secondhand": false, "category": "A > B > C"}'),  # duplicate key
    ("A > B > D", "Zeta", True, b' {"category": "A > B", "brand": "zeta ", "is_secondhand": "true"}\n'),  # lax bool
    ("E > F", "Acme", False, b'{"category": 5, "brand": "Acme", "is_secondhand": false}'),  # int category: rejected
    ("A > B > C", "Acme", True, b'{"category": "A > B > C", "brand": "Acme"}'),            # missing field: rejected
    ("A > B > D", "Nike", False, _answer("A > X > D", "Adidas")),                          # wrong parent, wrong brand
    ("E > F", "Acme", True, b"not json at all"),                                           # malformed: rejected
    ("A > B > C", "Acme", True, _answer("A > B > C > Z", "ACME", True)),                   # deeper than the truth
]
LOG = [*range(len(ROWS)), 2]   # qsl_idx 2 a second time (as a broken harness would write it)


def write_case(folder: Path, png: bytes) -> dict[str, Path]:
    """data/train-00000.parquet (the Shopify schema) and mlperf_log_accuracy.json under `folder`."""
    (folder / "data").mkdir(parents=True, exist_ok=True)
    n = len(ROWS)
    pq.write_table(pa.table({
        "product_title": [f"p{i}" for i in range(n)], "product_description": ["d"] * n,
        "potential_product_categories": [CATS] * n,
        "product_image": [{"bytes": png, "path": None}] * n,
        "ground_truth_category": [r[0] for r in ROWS], "ground_truth_brand": [r[1] for r in ROWS],
        "ground_truth_is_secondhand": [r[2] for r in ROWS]}), folder / "data" / "train-00000.parquet")
    log = write_log(folder / "mlperf_log_accuracy.json", [(i, ROWS[i][3]) for i in LOG])
    return {"log": log, "data": folder / "data"}
