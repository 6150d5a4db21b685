"""The MLPerf domain: no Prefect, no engines, no network; tasks/ and flows/ import it, never the reverse.

Its parts, each importing only those before it (tests/unit/test_architecture.py holds the contract):
`base` (schema, errors, files, Markdown), `rules` (each round's rules as data), `plan` (the plan and its options),
`results` (run specs and records, loadgen logs, published results), `budget` (memory fit, cost, Slurm time) and
`tree` (paths, assembly, truncation, curation, the package), `checks` (Podium's checker, the official one, gates).
"""
