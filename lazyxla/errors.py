"""Exceptions users can catch."""


class DonatedBufferError(RuntimeError):
    """A tensor whose device buffer was donated to a compiled graph was used again."""


class LoweringError(RuntimeError):
    """An op could not be lowered to JAX, or the lowered graph failed to compile."""
