"""Build the native engine (``amp_notebook/engine/_native*.so``) with the system C++ compiler and nanobind.

Used by the install hook (``hatch_build.py`` at the repository root, which loads this file by path: the
package itself is never imported while it is being built) and by ``tests/engine/sanitize.sh`` (the same
sources and flags plus ``-fsanitize=address,undefined``, into another folder). Standard library only, plus
nanobind (a PyPI build dependency, which ships its own C++ sources).

The algorithm is a small make: every ``.cc`` under ``src/`` and nanobind's one combined source become
objects in ``build/engine/<flavour>/``, compiled in parallel (one job per core); an object is rebuilt when
its source, any header under ``src/``, or the flags changed since it was built; then one link. Why not
CMake + Ninja: for a dozen files this function is as fast (measured in the engine note), needs no extra
download at install, and keeps the one list of flags that the sanitizer build extends.

``AMP_NATIVE=0`` in the environment skips the build on purpose (the engine is then unavailable); any other
failure stops the install with the compiler's message.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
MODULE = "_native"
# -ffp-contract=off: a * b + c stays a multiply and an add, each rounded, as numpy computes it. GCC contracts
# them into one fused multiply-add wherever the target has one, in C++ even in ISO mode; the default x86-64
# target has none, but a build for a newer one (or a function built for AVX2 with FMA) would change the bits.
CXX_FLAGS = ["-std=c++17", "-fPIC", "-fvisibility=hidden", "-ffp-contract=off", "-Wall", "-Wextra",
             "-Wno-unused-parameter"]  # fmt: skip
# -O2's "very cheap" vectorizer skips any loop that needs a remainder or an aliasing check, which is every
# kernel loop over a payload; the dynamic cost model vectorizes them (the elementwise kernels, the optimizers).
# Results stay bit-equal to the Python ops: elementwise IEEE operations give the same bits in vector lanes,
# and without -ffast-math no sum is reordered. -fno-math-errno lets a square root be the one instruction (in
# vector lanes too: Adam's update loop) instead of a call kept for errno: the result is the same correctly
# rounded value, and nothing here reads errno.
OPT_FLAGS = ["-O2", "-fvect-cost-model=dynamic", "-fno-math-errno"]
NANOBIND_FLAGS = ["-Os"]  # the binding layer runs at the boundary only: small beats fast, and it compiles 4x faster
SANITIZE_FLAGS = [
    "-O1",
    "-g",
    "-fno-omit-frame-pointer",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=undefined",
]


class BuildError(RuntimeError):
    """The native engine could not be built; the message holds the compiler's output."""


def skipped() -> bool:
    """Whether the environment asks to skip the native build (``AMP_NATIVE=0``)."""
    return os.environ.get("AMP_NATIVE", "1").strip().lower() in ("0", "false", "no", "off")


def extension_path(out_dir: Path = HERE) -> Path:
    return out_dir / f"{MODULE}{sysconfig.get_config_var('EXT_SUFFIX')}"


def _nanobind() -> tuple[Path, list[Path]]:
    try:
        import nanobind
    except ImportError as exc:
        raise BuildError(
            "nanobind is not installed: it is a build dependency of the native engine (pyproject.toml "
            "[build-system] requires it; in a development venv: pip install nanobind)"
        ) from exc
    src = Path(nanobind.source_dir())
    includes = [Path(nanobind.include_dir()), src.parent / "ext" / "robin_map" / "include"]
    return src / "nb_combined.cpp", includes


def _compile(cxx: str, source: Path, obj: Path, flags: list[str], stamp: str) -> str:
    """Compile one source unless its object exists and was built with ``stamp`` (flags, headers, source digests)."""
    stamp_file = obj.with_suffix(".flags")
    if obj.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return ""
    obj.parent.mkdir(parents=True, exist_ok=True)
    cmd = [cxx, *flags, "-c", str(source), "-o", str(obj)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        raise BuildError(f"compiling {source.name} failed:\n{' '.join(cmd)}\n{done.stderr}")
    stamp_file.write_text(stamp)
    return done.stderr


def build(
    out_dir: Path = HERE,
    build_dir: Path | None = None,
    sanitize: bool = False,
    jobs: int | None = None,
    quiet: bool = True,
) -> Path:
    """Compile and link the extension into ``out_dir``; returns its path. Raises :class:`BuildError`."""
    t0 = time.perf_counter()
    cxx = os.environ.get("CXX", "g++")
    root = HERE.parent.parent
    build_dir = build_dir or root / "build" / "engine" / ("sanitize" if sanitize else "release")
    nb_source, nb_includes = _nanobind()
    includes = [f"-I{p}" for p in (*nb_includes, Path(sysconfig.get_paths()["include"]), SRC)]
    mode = SANITIZE_FLAGS if sanitize else OPT_FLAGS
    own_flags = [*CXX_FLAGS, *mode, *includes]
    nb_flags = [*CXX_FLAGS, *(SANITIZE_FLAGS if sanitize else NANOBIND_FLAGS), *includes]
    # what an object depends on besides its source: the flags (less include paths, which move with a copy of
    # the tree), every header's text, and nanobind's version
    import nanobind

    base = " ".join(f for f in own_flags if not f.startswith("-I")) + f" nanobind {nanobind.__version__}"
    headers = sorted(SRC.rglob("*.h"))
    header_digest = hashlib.sha256(b"".join(h.read_bytes() for h in headers)).hexdigest()
    sources = sorted(SRC.rglob("*.cc"))
    units: list[tuple[Path, Path, list[str], str]] = []
    for source in sources:
        obj = build_dir / source.relative_to(SRC).with_suffix(".o")
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        units.append((source, obj, own_flags, f"{base}\n{header_digest}\n{digest}"))
    nb_obj = build_dir / "nanobind.o"
    nb_base = " ".join(f for f in nb_flags if not f.startswith("-I")) + f" nanobind {nanobind.__version__}"
    units.append((nb_source, nb_obj, nb_flags, nb_base))
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        warnings = list(pool.map(lambda u: _compile(cxx, *u), units))
    out = extension_path(out_dir)
    link = [cxx, "-shared", *mode, *(str(u[1]) for u in units), "-o", str(out), "-ldl", "-pthread"]
    done = subprocess.run(link, capture_output=True, text=True, check=False)
    if done.returncode:
        raise BuildError(f"linking {out.name} failed:\n{' '.join(link)}\n{done.stderr}")
    if not quiet:
        for text in warnings:
            if text:
                print(text, file=sys.stderr)
        print(f"built {out} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python amp_notebook/engine/build.py [--sanitize] [--out DIR]``: build in place (development)."""
    import argparse

    parser = argparse.ArgumentParser(description="Build the native engine extension.")
    parser.add_argument("--sanitize", action="store_true", help="AddressSanitizer + UBSan build")
    parser.add_argument("--out", type=Path, default=HERE, help="folder of the extension (default: in the package)")
    parser.add_argument("--build-dir", type=Path, default=None, help="folder of the objects (default: build/engine/)")
    args = parser.parse_args(argv)
    try:
        build(args.out, build_dir=args.build_dir, sanitize=args.sanitize, quiet=False)
    except BuildError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
