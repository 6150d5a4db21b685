"""The steps of the pipeline, one concern per folder (docs/architecture.md is the map); plain functions under thin
Prefect tasks."""
