"""Runnable examples (`python -m lazyxla.examples.NAME`)."""
