"""Serving a benchmark's engine: its build, its launch as the plan says (and the dry-run review), and the lazily
launched engine session the runs share."""
