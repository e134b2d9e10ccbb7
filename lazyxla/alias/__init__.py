"""Buffer donation: configuration switches and the per-graph donation planner."""
