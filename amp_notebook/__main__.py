"""``python -m amp_notebook`` is the ``amp-notebook`` command."""

from amp_notebook.cli import main

raise SystemExit(main())
