"""``python -m amp_notebook`` is the ``amp-notebook`` command."""

from amp_notebook.cli import main

if __name__ == "__main__":  # not when a worker process of `reproduce fig5 --processes N` imports this module
    raise SystemExit(main())
