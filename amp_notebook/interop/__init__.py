"""Moving models between amp_notebook and other frameworks (``amp.from_torch``)."""

from amp_notebook.interop.torch import TorchImport, from_torch

__all__ = ["TorchImport", "from_torch"]
