"""Benchmarks: figures that depend on the machine (how late, how fast), measured and printed, never asserted."""
