"""Models and data sets onto this node's disk: where they come from, the resumable verified copy, the atomic placing."""
