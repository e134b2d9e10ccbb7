"""Device buffers, transfers and execution."""
