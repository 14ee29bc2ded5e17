"""Benchmarks: time eager and baseline candidates over a problem suite, report fast_p."""
