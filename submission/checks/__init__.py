"""Judging a tree and its runs: Podium's checker (`checker`) over one module per part of the tree, MLCommons' own
checker run beside it and compared (`official`), and the acceptance gates a person applies before trusting a run
(`gates`).

`findings` holds the finding model and the shared context; `structure` walks the tree and checks what each folder
may hold; `loadgen` checks a loadgen scenario folder (performance and accuracy runs), `run` one performance run;
`compliance` its TESTxx folders; `endpoints` an endpoints (loadgen-less) scenario folder; `summary` writes the
official CSV columns.

Imports every other part of `submission/` but `budget`; nothing in `submission/` imports it.
"""
