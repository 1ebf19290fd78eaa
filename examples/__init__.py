"""Runnable snippets of frameworks that use this server (see README.md).

A package so that the tests import them as ``examples.*`` (a wheel of the test set, pysbd,
installs a top-level ``examples`` package of its own, which would win over a namespace one).
"""
