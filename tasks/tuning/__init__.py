"""Finding the rates and topologies to submit: the peak-QPS bisection, its probe runs, prefill:decode splits."""
