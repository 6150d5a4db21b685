"""The submission plan and everything validated when it loads: the plan model (`model`), each engine's typed options
(`engine_options`) and worker placement (`topology`), the Slurm section (`slurm_options`), the round's serving rules for
a closed plan (`serving`), and which scenarios a run measures afresh (`selection`).

Imports `submission.base` and `submission.rules`.
"""
