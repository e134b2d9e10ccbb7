"""Differential testing of lazyxla against eager CPU PyTorch (see program.py)."""
