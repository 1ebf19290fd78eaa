"""Benchmarks (not tests): harnesses that measure the served pipeline and write results/.

Run them as modules from the checkout, e.g. ``python -m benchmarks.rtf`` (``make bench``,
``make soak``); they import each other as ``benchmarks.<module>``. The Locust scenario is
a file Locust loads itself: ``locust -f benchmarks/locustfile.py``.
"""
