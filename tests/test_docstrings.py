"""Every public class says what it is: a class docstring (for the core classes, what they own and what they never
touch). A completeness guard read from the source, so a new class without one fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import amp_notebook

PACKAGE = Path(amp_notebook.__file__).parent
# modules whose classes get docstrings later; each entry must still hold a class without one, so the list
# cannot go stale
PENDING: set[str] = set()


def undocumented() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [
            n.name for n in tree.body
            if isinstance(n, ast.ClassDef) and not n.name.startswith("_") and ast.get_docstring(n) is None
        ]  # fmt: skip
        if names:
            found[path.relative_to(PACKAGE).as_posix()] = names
    return found


def test_every_public_class_has_a_docstring() -> None:
    missing = {module: names for module, names in undocumented().items() if module not in PENDING}
    assert not missing, f"classes without a docstring: {missing}"


def test_the_pending_list_is_not_stale() -> None:
    documented_now = PENDING - set(undocumented())
    assert not documented_now, f"documented now, drop from PENDING: {sorted(documented_now)}"


def test_the_core_classes_say_what_they_own_and_never_touch() -> None:
    from amp_notebook.engine.backend import NativeBackend
    from amp_notebook.engine.simulated import NativeSimulatedBackend
    from amp_notebook.ir.interpret import Interpreter
    from amp_notebook.runtime.backend import Backend
    from amp_notebook.runtime.backends.simulated import SimulatedBackend
    from amp_notebook.runtime.backends.threads import ThreadedBackend
    from amp_notebook.runtime.config import RunConfig
    from amp_notebook.runtime.controller import Controller
    from amp_notebook.runtime.credits import Credits
    from amp_notebook.runtime.inbox import Inbox
    from amp_notebook.runtime.plan import Plan
    from amp_notebook.runtime.session import EpochStats, Session
    from amp_notebook.runtime.worker import Worker
    from amp_notebook.trace.trace import Trace

    core = [Controller, RunConfig, Interpreter, Trace, Worker, Inbox, Plan, Credits, Session, EpochStats, Backend]
    core += [ThreadedBackend, SimulatedBackend, NativeBackend, NativeSimulatedBackend]
    try:
        from amp_notebook.runtime.backends.ray import RayBackend
        from amp_notebook.runtime.backends.ray_cluster import ClockOffset
    except ImportError:  # without the [ray] extra
        pass
    else:
        core += [RayBackend, ClockOffset]
    for cls in core:
        doc = cls.__doc__ or ""
        assert "Owns" in doc and "never" in doc, f"{cls.__name__}: say what it owns and what it never touches"
