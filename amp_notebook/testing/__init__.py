"""Tools that test amp_notebook itself: fuzzers for untrusted input (:mod:`amp_notebook.testing.fuzz`).

Nothing here is imported by the package at run time.
"""
