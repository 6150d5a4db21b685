"""The Prefect flows (submission, benchmark, search, scaling, bring-up) and the `podium` command line."""
