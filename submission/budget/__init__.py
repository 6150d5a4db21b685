"""What a plan costs before any GPU is allocated: the memory fit and sequence budgets (`capacity`), what a staged
checkpoint holds (`checkpoint`), a run's length and GPU-hours (`cost`), a Slurm allocation's time limit (`slurm_time`).

Imports `submission.base`, `submission.rules`, `submission.plan` and `submission.results`.
"""
