"""Operating Podium on a cluster: the checks before a run (inputs, preflight, a new cluster), the local dev stack,
what a Prefect server needs (pools, storage block, GPU-node limits, notifications)."""
