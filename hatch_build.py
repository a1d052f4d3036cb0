"""Install hook: builds the native engine (``amp_notebook/engine/_native*.so``) for ``pip install`` and
``pip install -e``, beside the widget bundles that hatch-jupyter-builder builds.

The build itself lives in ``amp_notebook/engine/build.py``, loaded here by path (the package is not importable
while it is being built). A failed build fails the install with the compiler's message; ``AMP_NATIVE=0``
skips it on purpose, and ``amp_notebook.engine.available()`` is then False.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

ROOT = Path(__file__).resolve().parent


def _load_build_module() -> Any:
    spec = importlib.util.spec_from_file_location("_amp_engine_build", ROOT / "amp_notebook" / "engine" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class NativeEngineHook(BuildHookInterface):
    PLUGIN_NAME = "amp-native-engine"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name not in ("wheel", "editable") and version != "editable":
            return
        build = _load_build_module()
        if build.skipped():
            self.app.display_warning("AMP_NATIVE=0: the native engine is not built (engine='native' unavailable)")
            return
        try:
            out = build.build(quiet=False)
        except build.BuildError as exc:
            raise RuntimeError(
                f"amp-notebook: building the native engine failed.\n{exc}\n"
                "Fix the compiler error above (a C++17 compiler, g++ or clang++, is needed), or install with "
                "AMP_NATIVE=0 to skip the native engine (training then uses the Python engine)."
            ) from None
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        build_data["artifacts"].append(str(out.relative_to(ROOT)))
