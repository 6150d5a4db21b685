"""The Qwen3-VL data set: the Shopify product catalogue (Hugging Face `Shopify/product-catalogue`, train+test, and
the Interactive `nvidia/Shopify-product-catalogue-8k`), read from its parquet files.

Columns (as the reference task and evaluator read them): `product_title`, `product_description`,
`potential_product_categories` (list of " > " paths), `product_image` (the Hugging Face Image feature: a struct of
`bytes` and `path`, or plain bytes) and, for scoring, `ground_truth_category`, `ground_truth_brand`,
`ground_truth_is_secondhand`. A folder of parquet shards is read in split order: `train*` files, then `test*`,
then the rest, each sorted by name (the reference concatenates train+test).

Images keep their original bytes: the rules forbid re-compressing or resizing them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from submission.base.errors import PlanError

PROMPT_COLUMNS = ("product_title", "product_description", "potential_product_categories", "product_image")
TRUTH_COLUMNS = ("ground_truth_category", "ground_truth_brand", "ground_truth_is_secondhand")
FIX = "use the Shopify product catalogue parquet files (Hugging Face Shopify/product-catalogue, train and test)"
_MAGIC = ((b"\x89PNG\r\n\x1a\n", "png"), (b"\xff\xd8\xff", "jpeg"), (b"GIF87a", "gif"), (b"GIF89a", "gif"),
          (b"BM", "bmp"))


@dataclass(frozen=True)
class Product:
    title: str
    description: str
    categories: tuple[str, ...]
    image: bytes
    image_format: str                    # png, jpeg, gif, webp, bmp (from the bytes, never re-encoded)
    category: str | None = None          # the ground truth, in accuracy files
    brand: str | None = None
    is_secondhand: bool | None = None

    def data_url(self) -> str:
        import base64

        return f"data:image/{self.image_format};base64,{base64.b64encode(self.image).decode('ascii')}"


@dataclass(frozen=True)
class ProductSet:
    path: str
    products: tuple[Product, ...]

    def __len__(self) -> int:
        return len(self.products)


def image_format(data: bytes) -> str | None:
    for magic, name in _MAGIC:
        if data.startswith(magic):
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise PlanError("no such file or folder", where=str(path), fix=FIX)
    files = sorted(path.rglob("*.parquet"))
    if not files:
        raise PlanError("the folder holds no parquet files", where=str(path), fix=FIX)

    def split_rank(p: Path) -> tuple[int, str]:
        name = p.name.lower()
        return (0 if name.startswith("train") else 1 if name.startswith("test") else 2, str(p))

    return sorted(files, key=split_rank)


def _image_bytes(value: Any, where: str) -> bytes:
    if isinstance(value, dict):
        value = value.get("bytes")
    if not isinstance(value, bytes | bytearray) or not value:
        raise PlanError(f"{where}: product_image has no image bytes", fix=FIX)
    return bytes(value)


def read_products(path: str | Path, *, accuracy: bool = False) -> ProductSet:
    """Every product of the file (or folder of shards), validated; ground truth too with `accuracy`."""
    import pyarrow.parquet as pq

    path = Path(path)
    needed = PROMPT_COLUMNS + (TRUTH_COLUMNS if accuracy else ())
    products: list[Product] = []
    for file in _files(path):
        try:
            table = pq.read_table(file)
        except (OSError, ValueError) as e:
            raise PlanError(f"cannot read the dataset: {e}", where=str(file), fix=FIX) from None
        missing = [c for c in needed if c not in table.column_names]
        if missing:
            raise PlanError(f"no {', '.join(repr(c) for c in missing)} column (found {sorted(table.column_names)})",
                            where=str(file), fix=FIX)
        rows = table.select(list(needed)).to_pylist()
        for i, row in enumerate(rows):
            where = f"{file.name} row {i}"
            image = _image_bytes(row["product_image"], where)
            fmt = image_format(image)
            if fmt is None:
                raise PlanError(f"{where}: product_image is not a PNG, JPEG, GIF, WEBP or BMP image", fix=FIX)
            categories = row["potential_product_categories"]
            if not isinstance(categories, list) or not all(isinstance(c, str) for c in categories):
                raise PlanError(f"{where}: potential_product_categories is not a list of strings", fix=FIX)
            truth: dict[str, Any] = {}
            if accuracy:
                if not isinstance(row["ground_truth_category"], str) or not row["ground_truth_category"]:
                    raise PlanError(f"{where}: ground_truth_category is empty", fix=FIX)
                truth = {"category": row["ground_truth_category"], "brand": str(row["ground_truth_brand"] or ""),
                         "is_secondhand": bool(row["ground_truth_is_secondhand"])}
            products.append(Product(title=str(row["product_title"] or ""),
                                    description=str(row["product_description"] or ""),
                                    categories=tuple(categories), image=image, image_format=fmt, **truth))
    if not products:
        raise PlanError("the dataset has no rows", where=str(path), fix=FIX)
    return ProductSet(str(path), tuple(products))
