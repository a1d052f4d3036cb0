#!/usr/bin/env bash
# Memory safety: build the native engine with AddressSanitizer + UBSan and run the engine's tests on it.
#
# The sanitized extension is built into a copy of the tracked tree (the working tree's own extension is
# left alone), CPython is not instrumented, so libasan is preloaded and leak detection is off (the
# interpreter's own allocations at exit would drown the report); any ASan or UBSan finding aborts the
# run with a report, and the script exits non-zero.
#   usage: tests/engine/sanitize.sh [pytest args]     (from the repository root, with .venv built)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$(pwd)
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
git ls-files -z | xargs -0 -I{} cp --parents {} "$WORK"
git ls-files -z --others --exclude-standard | xargs -0 -r -I{} cp --parents {} "$WORK"
cd "$WORK"
# objects kept in the working tree's build/ folder: a second run recompiles only what changed
"$PYTHON" amp_notebook/engine/build.py --sanitize --build-dir "$ROOT/build/engine/sanitize"
# grep without -q reads all of ldd's output: with -q it may exit at the match while ldd still writes, and the
# SIGPIPE that ldd gets then fails the pipeline under pipefail (a false "not linked")
ldd amp_notebook/engine/_native*.so | grep libasan >/dev/null || { echo "the extension is not linked with ASan" >&2; exit 1; }
export LD_PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libubsan.so)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# --capture=sys: a sanitizer's report (written to fd 2 just before it aborts) reaches the terminal
"$PYTHON" -m pytest tests/engine -q -p no:cacheprovider --capture=sys "$@"
