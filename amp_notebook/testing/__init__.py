"""Tools that test amp_notebook itself: fuzzers for untrusted input (:mod:`amp_notebook.testing.fuzz`, with
the mutations they apply in :mod:`amp_notebook.testing.mutations`).

Nothing here is imported by the package at run time.
"""
