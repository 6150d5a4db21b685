"""Dataset readers on small files written here in the real schemas: every format, and the missing column or key."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from submission.base.errors import PlanError
from tasks.datasets.prompts import read_cnn_eval, read_deepseek, read_gpt_oss, read_open_orca, read_prompts
from tasks.datasets.shopify import image_format, read_products


def _png(color: tuple[int, int, int]) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (4, 3), color).save(out, format="PNG")
    return out.getvalue()


def gpt_oss_parquet(path: Path, *, accuracy: bool = True, prompt: str = "input_tokens") -> Path:
    columns = {"dataset": ["aime25", "gpqa_diamond"], "question": ["q0", "q1"],
               prompt: pa.array([[1, 2, 3], [4, 5]], type=pa.list_(pa.int32())), "text_input": ["a", "b"]}
    if accuracy:
        columns["ground_truth"] = ["42", "C"]
    pq.write_table(pa.table(columns), path)
    return path


def test_gpt_oss_parquet(tmp_path: Path) -> None:
    data = read_gpt_oss(gpt_oss_parquet(tmp_path / "acc.parquet"), True)
    assert data.prompts == ((1, 2, 3), (4, 5))
    assert data.ground_truth == ("42", "C") and data.subsets == ("aime25", "gpqa_diamond")
    older = read_prompts("gpt-oss-120b", gpt_oss_parquet(tmp_path / "old.parquet", prompt="tok_input"))
    assert older.prompts == data.prompts and older.ground_truth is None


def test_gpt_oss_missing_columns_are_named(tmp_path: Path) -> None:
    perf = gpt_oss_parquet(tmp_path / "perf.parquet", accuracy=False)
    assert len(read_gpt_oss(perf, False)) == 2   # a performance file needs no references
    with pytest.raises(PlanError, match="no reference answer column: expected 'ground_truth'"):
        read_gpt_oss(perf, True)
    pq.write_table(pa.table({"dataset": ["x"], "ground_truth": ["1"]}), tmp_path / "bad.parquet")
    with pytest.raises(PlanError, match="no prompt column: expected 'input_tokens' or 'tok_input'") as err:
        read_gpt_oss(tmp_path / "bad.parquet", True)
    assert "bad.parquet" in str(err.value) and "fix:" in str(err.value)


def test_empty_prompt_row_is_named(tmp_path: Path) -> None:
    pq.write_table(pa.table({"input_tokens": pa.array([[1], []], type=pa.list_(pa.int32()))}), tmp_path / "e.parquet")
    with pytest.raises(PlanError, match="row 1: input_tokens is empty"):
        read_gpt_oss(tmp_path / "e.parquet", False)


def test_cnn_eval_json(tmp_path: Path) -> None:
    records = [{"instruction": "Summarize", "input": "article one", "tok_input": [128000, 9, 8], "output": "sum one"},
               {"instruction": "Summarize", "input": "article two", "tok_input": [128000, 7], "output": "sum two"}]
    path = tmp_path / "cnn_eval.json"
    path.write_text(json.dumps(records))
    data = read_cnn_eval(path, True)
    assert data.prompts == ((128000, 9, 8), (128000, 7)) and data.ground_truth == ("sum one", "sum two")
    del records[1]["output"]
    path.write_text(json.dumps(records))
    assert len(read_cnn_eval(path, False)) == 2
    with pytest.raises(PlanError, match="record 1 has no 'output' key"):
        read_cnn_eval(path, True)
    path.write_text(json.dumps({"tok_input": [1]}))
    with pytest.raises(PlanError, match="expected a JSON list of records"):
        read_cnn_eval(path, False)


def test_open_orca_pickle(tmp_path: Path) -> None:
    frame = pd.DataFrame({"id": ["cot.1", "flan.2"], "system_prompt": ["", "be brief"], "question": ["q1", "q2"],
                          "input": ["<s>[INST] q1 [/INST]", "<s>[INST] q2 [/INST]"],
                          "tok_input": [[1, 518, 25580], [1, 2]], "output": ["answer one.", "answer two."]})
    frame.to_pickle(tmp_path / "open_orca.pkl")
    data = read_open_orca(tmp_path / "open_orca.pkl", True)
    assert data.prompts == ((1, 518, 25580), (1, 2)) and data.ground_truth == ("answer one.", "answer two.")
    frame.drop(columns=["output"]).to_pickle(tmp_path / "no_output.pkl")
    with pytest.raises(PlanError, match="no reference answer column: expected 'output'"):
        read_open_orca(tmp_path / "no_output.pkl", True)


def test_deepseek_pickle_and_its_fallback_columns(tmp_path: Path) -> None:
    frame = pd.DataFrame({"dataset": ["aime", "gpqa"], "question": ["q", "q"], "tok_input": [[0, 1], [0, 2]],
                          "ground_truth": ["7", "B"]})
    frame.to_pickle(tmp_path / "ds.pkl")
    data = read_deepseek(tmp_path / "ds.pkl", True)
    assert data.subsets == ("aime", "gpqa") and data.ground_truth == ("7", "B")
    older = frame.rename(columns={"ground_truth": "gt_output", "dataset": "metric"})
    older.to_pickle(tmp_path / "old.pkl")
    assert read_deepseek(tmp_path / "old.pkl", True).ground_truth == ("7", "B")
    frame.drop(columns=["tok_input"]).to_pickle(tmp_path / "bad.pkl")
    with pytest.raises(PlanError, match="no prompt column: expected 'tok_input'"):
        read_deepseek(tmp_path / "bad.pkl", False)


def test_a_pickle_that_is_not_a_dataframe(tmp_path: Path) -> None:
    pd.to_pickle([1, 2, 3], tmp_path / "list.pkl")
    with pytest.raises(PlanError, match="holds a list, not a pandas DataFrame"):
        read_deepseek(tmp_path / "list.pkl", False)


def shopify_parquet(path: Path, *, accuracy: bool = True, image_struct: bool = True) -> Path:
    images = [_png((255, 0, 0)), _png((0, 0, 255))]
    image = [{"bytes": b, "path": f"{i}.png"} for i, b in enumerate(images)] if image_struct else images
    columns = {"product_title": ["Desk lamp", "Hiking boot"], "product_description": ["<div>brass</div>", "leather"],
               "potential_product_categories": [["Home > Lighting", "Apparel > Shoes"], ["Apparel > Shoes"]],
               "product_image": image}
    if accuracy:
        columns |= {"ground_truth_category": ["Home > Lighting", "Apparel > Shoes"],
                    "ground_truth_brand": ["Lumen", "Trail"], "ground_truth_is_secondhand": [False, True]}
    pq.write_table(pa.table(columns), path)
    return path


def test_shopify_catalogue_rows_with_image_bytes(tmp_path: Path) -> None:
    products = read_products(shopify_parquet(tmp_path / "test-0.parquet"), accuracy=True).products
    assert [p.title for p in products] == ["Desk lamp", "Hiking boot"]
    assert products[0].image == _png((255, 0, 0)) and products[0].image_format == "png"
    assert products[1].category == "Apparel > Shoes" and products[1].is_secondhand is True
    assert products[0].data_url().startswith("data:image/png;base64,iVBOR")
    plain = read_products(shopify_parquet(tmp_path / "plain.parquet", image_struct=False))
    assert plain.products[1].image == _png((0, 0, 255)) and plain.products[1].category is None


def test_shopify_folder_reads_train_before_test(tmp_path: Path) -> None:
    shard = tmp_path / "data"
    shard.mkdir()
    shopify_parquet(shard / "test-00000-of-00001.parquet")
    pq.write_table(pq.read_table(shard / "test-00000-of-00001.parquet").slice(1, 1), shard / "train-00000.parquet")
    titles = [p.title for p in read_products(shard).products]
    assert titles == ["Hiking boot", "Desk lamp", "Hiking boot"]


def test_shopify_missing_columns_and_bad_images(tmp_path: Path) -> None:
    perf = shopify_parquet(tmp_path / "perf.parquet", accuracy=False)
    with pytest.raises(PlanError, match="no 'ground_truth_category', 'ground_truth_brand', "
                                        "'ground_truth_is_secondhand' column"):
        read_products(perf, accuracy=True)
    table = pq.read_table(perf).drop(["product_image"]).append_column("product_image", pa.array([b"", b"GIF89a.."]))
    pq.write_table(table, tmp_path / "img.parquet")
    with pytest.raises(PlanError, match="row 0: product_image has no image bytes"):
        read_products(tmp_path / "img.parquet")
    table = table.drop(["product_image"]).append_column("product_image", pa.array([b"not an image", b"x"]))
    pq.write_table(table, tmp_path / "img2.parquet")
    with pytest.raises(PlanError, match="row 0: product_image is not a PNG, JPEG, GIF, WEBP or BMP image"):
        read_products(tmp_path / "img2.parquet")


def test_image_formats_from_bytes() -> None:
    assert image_format(b"\xff\xd8\xff\xe0rest") == "jpeg"
    assert image_format(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "webp"
    assert image_format(b"GIF87a") == "gif" and image_format(b"hello") is None


def test_unknown_benchmark_reader() -> None:
    with pytest.raises(PlanError, match="no token-prompt reader for benchmark 'gpt-oss-12b'"):
        read_prompts("gpt-oss-12b", "x.parquet")
