"""The compiler's error: a message that names the user's source line and says what to write instead."""

from __future__ import annotations

from amp_notebook.errors import AmpError


class CompileError(AmpError, ValueError):
    """A model function the compiler cannot translate, or translated into a graph that does not validate.

    ``line`` is the line in the user's file (or notebook cell) where the problem is, ``text`` that line's
    source, ``function`` the model function's name. ``str(error)`` reads::

        line 7 in model(): 'if h.sum() > 0' branches on a tensor value; ...
            if h.sum() > 0:
    """

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        text: str | None = None,
        function: str | None = None,
        filename: str | None = None,
    ) -> None:
        self.message = message
        self.line = line
        self.text = text
        self.function = function
        self.filename = filename
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.function:
            where.append(f"in {self.function}()")
        head = " ".join(where)
        out = f"{head}: {self.message}" if head else self.message
        if self.text:
            out += f"\n    {self.text.strip()}"
        return out
