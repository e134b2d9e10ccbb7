"""Sync: collect pending work into a graph, key it, plan donation, run it."""
