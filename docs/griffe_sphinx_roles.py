"""A griffe extension for the API reference: Sphinx roles in docstrings become Markdown code.

The package's docstrings cross-reference with Sphinx roles (``:class:`~amp_notebook.runtime.run.Run```),
which Markdown would show as written. This turns each into inline code: the last name after a ``~``
(``Run``), the whole dotted path otherwise, the text of ``:role:`text <target>```.
mkdocstrings loads it from mkdocs.yml (``extensions``); it changes only the text that the site shows.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|exc|data|obj|const):`([^`]+)`")


def as_code(match: re.Match[str]) -> str:
    target = match.group(1).strip()
    labelled = re.fullmatch(r"(.+?)\s*<[^>]+>", target)
    if labelled:
        return f"`{labelled.group(1)}`"
    if target.startswith("~"):
        return f"`{target[1:].rsplit('.', 1)[-1]}`"
    return f"`{target}`"


class SphinxRolesAsCode(Extension):
    def on_object(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(as_code, obj.docstring.value)
