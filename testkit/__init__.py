"""Helpers for the tests and the benchmarks only: random-weight Coqui checkpoints, Coqui's
own inference as the reference an export is compared against, and shared sample texts.

A folder of the checkout, never of the wheel (pyproject's packages leave it out): nothing
that serves or exports imports it (tests/test_package_layout.py checks). The tests and
`python -m benchmarks...` find it from the checkout's root.
"""
