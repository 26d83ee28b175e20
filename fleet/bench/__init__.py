"""Benchmarks that run ON the host: self-contained scripts shipped inline like the probe.

`runner.py` (synthetic: a configured command, DCGM diag, or a CUDA micro-benchmark) and
`replay.py` (open-loop trace replay). Stdlib only, Python 3.9 syntax; the controller imports
them for their pure parsers.
"""
