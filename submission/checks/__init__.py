"""The checks behind `submission.checker`, one module per part of the tree.

`findings` holds the finding model and the shared context; `structure` walks the tree and checks what each folder
may hold; `loadgen` checks a loadgen scenario folder (performance and accuracy runs); `compliance` its TESTxx
folders; `endpoints` an endpoints (loadgen-less) scenario folder; `summary` writes the official CSV columns.
"""
