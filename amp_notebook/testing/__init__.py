"""Tools that test amp_notebook itself: fuzzers for untrusted input (:mod:`amp_notebook.testing.fuzz`, with
the mutations they apply in :mod:`amp_notebook.testing.mutations`; checkpoints: :mod:`.fuzz_checkpoint`),
fault injection into runs (:mod:`.faults`, on the small runs of :mod:`.runs`) and kills mid-save
(:mod:`.kills`).

Nothing here is imported by the package at run time.
"""
