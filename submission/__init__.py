"""The MLPerf domain: rules as data, the plan and its options, loadgen logs, the tree, the checker. No Prefect, no
engines, no network; tasks/ and flows/ import it, never the reverse."""
