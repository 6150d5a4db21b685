"""The CPU smoke engines (a tiny Llama, a tiny LLaVA under `transformers serve`) and the models and data sets they
serve, all built locally and deterministically. Smoke only: never a benchmark result."""

from __future__ import annotations

from pathlib import Path


def _build(store: Path, model, data_file: Path, build_data) -> list[str]:
    """`model` (a module with MODEL_NAME and build) into `<store>/models/<MODEL_NAME>` unless its weights are there,
    then `build_data(model folder)` unless `data_file` is there; what it did, a line each."""
    done = []
    folder = store / "models" / model.MODEL_NAME
    if not (folder / "model.safetensors").is_file():
        files = model.build(folder)
        done.append(f"built {folder}: " + ", ".join(f"{k} {v[:12]}" for k, v in files.items()))
    if not data_file.is_file():
        build_data(folder)
        done.append(f"built {data_file.parent}")
    return done


def build_assets(store: Path) -> list[str]:
    """The tiny Llama into `<store>/models/tiny-llama` and the smoke data set into `<store>/datasets/smoke`, each only
    when missing (deterministic: the same bytes on every machine). Returns what it did, a line each."""
    from tasks.engines.smoke import data, model

    datasets = store / "datasets" / "smoke"
    done = _build(store, model, datasets / data.ACC_FILE, lambda folder: data.build(folder, datasets))
    if not (datasets / data.ANSWERS_FILE).is_file():   # a store built before the simulated engine's answers
        done.append(f"built {data.build_answers(store / 'models' / model.MODEL_NAME, datasets)}")
    return [*done, f"smoke assets ready in {store}"]


VLM_ROWS, VLM_MAX_TOKENS = 16, 8   # deployments/plans/smoke-vlm.yaml's data set and answer length


def build_vlm_assets(store: Path) -> list[str]:
    """The tiny LLaVA into `<store>/models/tiny-llava` and its Shopify-shaped data set into
    `<store>/datasets/smoke-vlm`, each only when missing (deterministic); what it did, a line each."""
    from tasks.engines.smoke import vlm_data, vlm_model

    datasets = store / "datasets" / "smoke-vlm"
    done = _build(store, vlm_model, datasets / vlm_data.FILE,
                  lambda folder: vlm_data.build(folder, datasets, count=VLM_ROWS, max_tokens=VLM_MAX_TOKENS))
    return [*done, f"VLM smoke assets ready in {store}"]
