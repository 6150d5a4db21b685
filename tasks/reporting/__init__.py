"""What a run tells its users: the results table and summary as Prefect artifacts, plots, data checks, the acceptance
gates' inputs."""
