"""What a run tells its users: the results table and summary as Prefect artifacts, its one-line outcome, live progress
on the run a person started, plots, data checks, the acceptance gates' inputs."""
