"""Packaging metadata: environment.yml, pyproject.toml, and that .ci/run runs the README's test command."""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def readme_code_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [block.strip() for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)]


def test_environment_yml() -> None:
    env = yaml.safe_load((ROOT / "environment.yml").read_text(encoding="utf-8"))
    assert env["name"] == "amp-notebook"
    assert env["channels"] == ["conda-forge"]
    deps = env["dependencies"]
    names = [d for d in deps if isinstance(d, str)]
    assert "python=3.11" in names
    for package in (
        "numpy",
        "networkx",
        "threadpoolctl",
        "tqdm",
        "scikit-learn",
        "jsonschema>=4.18",
        "nodejs>=18",
        "pip",
    ):
        assert package in names, f"environment.yml: expected {package!r} in dependencies, found {names}"
    pip_sections = [d["pip"] for d in deps if isinstance(d, dict) and "pip" in d]
    assert pip_sections == [["-e .[notebook,ray]"]]  # ray from PyPI: conda-forge lags its releases


def test_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    meta = project["project"]
    assert meta["name"] == "amp-notebook"
    assert meta["version"] == "0.1.0"
    assert meta["requires-python"] == ">=3.11"
    assert meta["scripts"] == {"amp-notebook": "amp_notebook.cli:main"}
    assert project["build-system"]["build-backend"] == "hatchling.build"
    assert project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["amp_notebook"]
    assert "torch==2.13.0" in meta["optional-dependencies"]["dev"]
    assert set(meta["optional-dependencies"]) >= {"dev", "notebook"}
    runtime = {re.split(r"[<>=!~ \[]", dep, maxsplit=1)[0] for dep in meta["dependencies"]}
    assert runtime == {"numpy", "networkx", "threadpoolctl", "tqdm", "scikit-learn", "jsonschema"}


def test_widget_bundles_are_built_at_install_and_never_committed() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert any(r.startswith("hatch-jupyter-builder") for r in project["build-system"]["requires"])
    hook = project["tool"]["hatch"]["build"]["hooks"]["jupyter-builder"]
    assert hook["build-kwargs"]["path"] == "widgets"
    assert set(hook["ensured-targets"]) == {"amp_notebook/ui/static/dashboard.js", "amp_notebook/ui/static/builder.js"}
    package = json.loads((ROOT / "widgets" / "package.json").read_text(encoding="utf-8"))
    assert "build" in package["scripts"] and "esbuild" in package["devDependencies"]
    assert "/amp_notebook/ui/static/" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    for bundle in hook["ensured-targets"]:  # built by this checkout's install
        assert (ROOT / bundle).exists(), f"{bundle} was not built at install; see README (needs node and npm)"


def test_readme_starts_with_the_two_fresh_machine_commands() -> None:
    blocks = readme_code_blocks()
    assert len(blocks) >= 2
    assert blocks[0] == "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/amp-notebook demo"
    assert blocks[1] == (
        'python3 -m venv .venv && .venv/bin/pip install -e ".[dev,notebook,docs]" && .venv/bin/python -m pytest'
    )


def test_ci_run_runs_the_readme_test_command_verbatim() -> None:
    script = ROOT / ".ci" / "run"
    text = script.read_text(encoding="utf-8")
    assert os.access(script, os.X_OK), f"{script}: expected an executable file; run `chmod +x .ci/run`"
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    command = readme_code_blocks()[1]
    lines = [line.strip() for line in text.splitlines()]
    assert command in lines, f"{script}: expected a line with the README's test command {command!r}"
    # Nothing that would hide a failure.
    assert "|| true" not in text and "set +e" not in text
