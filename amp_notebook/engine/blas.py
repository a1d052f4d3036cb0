"""Hand numpy's own BLAS to the native engine, so the process holds one BLAS and one thread pool.

numpy's wheels bundle OpenBLAS (scipy-openblas, symbols ``scipy_cblas_dgemm64_`` ...); threadpoolctl
reports the path of every BLAS loaded in the process, and numpy's is the one under numpy's own folder
(``numpy.libs``, or numpy's directory on other layouts). The engine opens that path with
``RTLD_NOLOAD`` (it maps nothing new) and looks its cblas symbols up in each naming style; if none is
found the engine computes products with a plain loop and :func:`amp_notebook.engine.status` says why.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
from threadpoolctl import threadpool_info


def numpy_blas_path() -> str | None:
    """The file of the BLAS library numpy itself uses, or None when none is found."""
    np.ones((2, 2)) @ np.ones((2, 2))  # make sure numpy's BLAS is loaded
    numpy_dir = Path(np.__file__).resolve().parent
    roots = (numpy_dir, numpy_dir.parent / "numpy.libs")
    for info in threadpool_info():
        if info.get("user_api") != "blas":
            continue
        path = Path(info["filepath"]).resolve()
        if any(root in path.parents for root in roots):
            return str(path)
    return None


def attach_numpy_blas(module: ModuleType) -> str:
    """Load numpy's BLAS into the engine; returns "" or why the plain loop is used instead."""
    path = numpy_blas_path()
    if path is None:
        return "numpy's BLAS library was not found among the loaded libraries: products use the plain loop"
    return module.load_blas(path)


__all__ = ["attach_numpy_blas", "numpy_blas_path"]
