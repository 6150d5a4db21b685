"""The CPU smoke engines (a tiny Llama, a tiny LLaVA under `transformers serve`) and the models and data sets they
serve, all built locally and deterministically. Smoke only: never a benchmark result."""
