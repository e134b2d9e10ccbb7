"""PyTorch side: device registration, the lazy tensor type and op dispatch."""
