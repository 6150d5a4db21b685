"""The dress rehearsal's parts that stand in for what a laptop cannot have: synthetic data sets at the reference's real
sizes and schemas, with answers the real evaluators score above the accuracy targets (`tasks.rehearsal.data`), served
by the simulated engine (`tasks.engines.simulated.answers`). Never a benchmark result."""
