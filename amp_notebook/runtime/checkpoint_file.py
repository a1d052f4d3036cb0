"""The checkpoint file: one ``.npz`` archive that holds the arrays and a JSON manifest; written atomically,
read without running anything it contains.

Layout. A checkpoint is a zip archive in numpy's ``.npz`` layout (``np.load(path, allow_pickle=False)``
opens it): one ``NAME.npy`` member per array (parameters, optimizer moments, pending gradients, the
remaining key order) and one ``manifest.json`` member that says what everything is (``unzip -p
checkpoint.npz manifest.json`` shows it). The manifest refers to each array by its member name, with the
shape and dtype it must have; its structure is published as a JSON Schema (``checkpoint.schema.json``
beside this module) and checked before anything in it is read.

Writing (:func:`write_archive`) goes to a temporary file in the target's directory, is flushed and
``fsync``-ed, then renamed over the target (``os.replace``, atomic on POSIX and Windows) and the directory
is ``fsync``-ed. A process killed at any moment leaves either the previous file or the new one, never a
mix; what it leaves is a stray ``.NAME.PID.*.tmp`` file, which the next save in that directory removes
once its writer is gone.

Reading (:func:`read_archive`) trusts nothing: a pickle is refused by its first byte, members must be
stored uncompressed (no zip bombs) with unique names, each ``.npy`` header is parsed by numpy's literal
header reader and must declare a plain numeric dtype (bool, int, uint, float: never an object array,
which is how pickles hide in ``.npy`` files) and exactly the bytes the member holds; the zip CRC of every
member is checked. Anything else raises :class:`CheckpointError`, which lists what was wrong.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import zipfile
from contextlib import suppress
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from amp_notebook.errors import AmpError
from amp_notebook.ir.schema import nesting, problems, validator_for

FORMAT = "amp_notebook.checkpoint"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SCHEMA_FILE = "checkpoint.schema.json"
MAX_MANIFEST_BYTES = 64 * 2**20
MAX_MEMBERS = 100_000
MAX_NESTING = 64  # JSON levels in a manifest (it needs about 8; node "meta" in the graph gets the rest)
ARRAY_KINDS = "biuf"  # bool, signed and unsigned ints, floats
PICKLE_HINT = (
    "amp_notebook never unpickles anything (unpickling runs code chosen by whoever wrote the file); "
    "checkpoints are .npz archives of plain numeric arrays plus a JSON manifest, written by run.save(path) "
    "or TrainResult.save_checkpoint(path)"
)


class CheckpointError(AmpError, ValueError):
    """A checkpoint that cannot be written, read or resumed; ``problems`` lists every problem found."""

    def __init__(self, source: str, problems: list[str] | str) -> None:
        self.source = source
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        if len(self.problems) == 1:
            message = f"{source}: {self.problems[0]}"
        else:
            message = f"{source} has {len(self.problems)} problems:\n" + "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(message)


# ---------------------------------------------------------------------------------------------- writing
def write_archive(path: str | Path, manifest: dict[str, Any], arrays: dict[str, np.ndarray]) -> Path:
    """Write ``manifest`` and ``arrays`` (member name -> array) to ``path`` atomically; returns the path."""
    path = Path(path)
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(directory, path.name)
    text = json.dumps(manifest, allow_nan=False, separators=(",", ":"))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
                zf.writestr(MANIFEST, text)
                for name, array in arrays.items():
                    with zf.open(name + ".npy", "w", force_zip64=True) as member:
                        np.lib.format.write_array(member, np.ascontiguousarray(array), allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_directory(directory)
    return path


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (POSIX; elsewhere a directory cannot be opened and this is a no-op)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove_stale_temporaries(directory: Path, name: str) -> None:
    """Temporary files of earlier saves to ``name`` whose writing process has ended (killed mid-save)."""
    for tmp in directory.glob(f".{name}.*.tmp"):
        pid_text = tmp.name[len(name) + 2 :].split(".", 1)[0]
        if pid_text.isdigit() and not _process_alive(int(pid_text)):
            with suppress(OSError):
                tmp.unlink()


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # someone else's process, or a platform without signal 0: leave its file alone
    return True


# ---------------------------------------------------------------------------------------------- reading
def read_archive(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The manifest (checked against the published schema) and every array of the checkpoint at ``path``."""
    source = str(path)
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed below, after the zip reader that borrows it)
    except FileNotFoundError:
        raise CheckpointError(source, "no such file; save one with run.save(path)") from None
    except OSError as exc:
        raise CheckpointError(source, f"cannot be opened: {exc}") from None
    try:
        head = f.read(4)
        if head[:1] == b"\x80":
            raise CheckpointError(source, f"this is a Python pickle, which is refused: {PICKLE_HINT}")
        if head not in (b"PK\x03\x04", b"PK\x05\x06"):
            raise CheckpointError(
                source, f"not a checkpoint: expected an .npz (zip) archive, found a file starting with {head!r}"
            )
        f.seek(0)
        try:
            with zipfile.ZipFile(f) as zf:
                return _read_members(zf, source)
        except CheckpointError:
            raise
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError, NotImplementedError,
                OverflowError, UnicodeDecodeError, KeyError, IndexError, TypeError, SyntaxError) as exc:  # fmt: skip
            # a damaged zip directory or npy header: zipfile and numpy's header parser raise all of these
            raise CheckpointError(source, f"damaged archive ({type(exc).__name__}: {exc})") from None
    finally:
        f.close()


def _read_members(zf: zipfile.ZipFile, source: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise CheckpointError(source, f"expected at most {MAX_MEMBERS} archive members, found {len(infos)}")
    problems = []
    names = [info.filename for info in infos]
    duplicates = sorted({n for n in names if names.count(n) > 1}) if len(set(names)) != len(names) else []
    if duplicates:
        problems.append(f"archive members {duplicates[:5]} appear more than once")
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED:
            problems.append(f"member {info.filename!r} is compressed; checkpoints store members uncompressed")
        elif info.filename != MANIFEST and not info.filename.endswith(".npy"):
            problems.append(f"unexpected member {info.filename!r}: a checkpoint holds manifest.json and .npy arrays")
    if MANIFEST not in names:
        problems.append("no manifest.json member: this .npz was not written as an amp_notebook checkpoint")
    if problems:
        raise CheckpointError(source, problems)
    manifest = parse_manifest(zf.read(zf.getinfo(MANIFEST)) if zf.getinfo(MANIFEST).file_size <= MAX_MANIFEST_BYTES
                              else b"", source)  # fmt: skip
    arrays = {info.filename[: -len(".npy")]: _read_npy(zf, info, source) for info in infos
              if info.filename != MANIFEST}  # fmt: skip
    return manifest, arrays


def _read_npy(zf: zipfile.ZipFile, info: zipfile.ZipInfo, source: str) -> np.ndarray:
    where = f"array {info.filename!r}"
    with zf.open(info) as fh:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh, max_header_size=10_000)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh, max_header_size=10_000)
        else:
            raise CheckpointError(source, f"{where}: unsupported .npy version {version}")
        if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None or dtype.kind not in ARRAY_KINDS:
            raise CheckpointError(
                source, f"{where}: dtype {dtype.str!r} refused; checkpoints hold plain numbers only. {PICKLE_HINT}"
            )
        count = math.prod(shape)
        nbytes = count * dtype.itemsize
        if nbytes != info.file_size - fh.tell():
            raise CheckpointError(
                source, f"{where}: its header declares shape {shape} ({nbytes} bytes) but the member holds "
                f"{info.file_size - fh.tell()} bytes of data; the file is damaged or truncated"
            )  # fmt: skip
        buffer = bytearray(nbytes)
        view = memoryview(buffer)
        got = 0
        while got < nbytes:
            n = fh.readinto(view[got:])
            if not n:
                raise CheckpointError(source, f"{where}: truncated ({got} of {nbytes} bytes)")
            got += n
        if fh.read(1):  # reading to the end also makes zipfile check the member's CRC
            raise CheckpointError(source, f"{where}: more data than its header declares")
    return np.frombuffer(buffer, dtype=dtype).reshape(shape, order="F" if fortran else "C")


# ---------------------------------------------------------------------------------------------- manifest
def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_manifest(data: bytes, source: str) -> dict[str, Any]:
    """Strict JSON (no NaN/Infinity, bounded nesting) checked against the published manifest schema."""
    if not data:
        raise CheckpointError(source, f"manifest.json is empty or larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        manifest = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointError(source, f"manifest.json is not valid JSON ({type(exc).__name__}: {exc})") from None
    if nesting(manifest, MAX_NESTING) > MAX_NESTING:
        raise CheckpointError(source, f"manifest.json nests deeper than {MAX_NESTING} levels")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise CheckpointError(source, f"manifest.json: expected format {FORMAT!r}, found {found!r}")
    if manifest.get("version") != FORMAT_VERSION:
        raise CheckpointError(
            source,
            f"manifest.json: expected checkpoint format version {FORMAT_VERSION}, found {manifest.get('version')!r}; "
            "a newer amp_notebook wrote it: upgrade to read it",
        )
    found = problems(_validator(), manifest)
    if found:
        raise CheckpointError(source, [f"manifest.json {p}" for p in found[:20]])
    return manifest


@cache
def manifest_schema() -> dict[str, Any]:
    """The published JSON Schema of checkpoint manifests (draft 2020-12)."""
    text = resources.files("amp_notebook.runtime").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    return json.loads(text)


@cache
def _validator() -> Any:
    return validator_for(manifest_schema())


__all__ = ["FORMAT", "FORMAT_VERSION", "CheckpointError", "manifest_schema", "read_archive", "write_archive"]
