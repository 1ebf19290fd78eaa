"""Helpers for the tests and the benchmarks only: random-weight Coqui checkpoints, Coqui's
own inference as the reference an export is compared against, and shared sample texts.

Nothing that serves or exports imports this package (tests/test_package_layout.py checks).
"""
