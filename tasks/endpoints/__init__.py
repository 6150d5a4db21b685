"""The MLCommons endpoints client (`inference-endpoint`) as Podium's measuring client for the benchmarks the round's
rules give `harness: endpoints` (Qwen3-VL in v6.1): its config from the plan (`config`), the staged data set in its
layout (`dataset`), one run of it and its results (`runner`, `results`). The peer of `tasks.harness` (loadgen)."""
