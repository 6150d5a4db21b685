"""What a measured run is and says: the resolved run spec and its record, and how many runs a plan makes (`runs`),
loadgen's log files parsed (`logs`), the round's published results and a run compared with them (`published`).

Imports `submission.base`, `submission.rules` and `submission.plan`.
"""
