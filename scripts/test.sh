#!/usr/bin/env bash
# Set up (idempotent, with test tools), lint, type-check, and run the tests; the 15 slowest are listed at the end.
# Usage: scripts/test.sh [--fast] [PYTEST ARGS...]
#   no flag: the whole suite, slow integration tests included (what CI runs), on two pytest-xdist workers that
#            each take whole files, the heaviest first (tests/conftest.py orders them; a file's module fixtures,
#            such as a loaded bundled model, are built once)
#   --fast:  one check per feature (the full suite runs each matrix whole): the tests that need no bundled model,
#            start no fresh Python and are no matrix's other case (markers `slow` and `subprocess` left out; a
#            matrix keeps one representative case unmarked), on two workers taking whole files (a file's tiny models
#            then compile their programs on one worker only), the heaviest first (its own order): under 3
#            minutes. Every JAX program compiles at LLVM -O0, since most of the lane's time is XLA compiling tiny
#            models' programs; in the full suite only the unit tests' engine programs do (tests/unit/conftest.py),
#            as -O0 programs run slower and their floating-point results differ in the last digits. Each unit
#            test file starts with what is alive moved out of the garbage collector's reach (the same
#            conftest). What each of these choices saved: docs/benchmarks.md, "The test suite's speed-ups".
#   --extended: only the tests marked `extended`: the long checks the full suite leaves out, each beside a cheaper
#            check of the same feature that it keeps (a three-minute soak, an 8k-token prompt, Gemma3's repeat of a
#            SmolLM2 measure). Run before a release, or after changing what they cover: docs/benchmarks.md, "The
#            test suite's time", lists each with its cost.
set -euo pipefail
cd "$(dirname "$0")/.."
marks=(-m "not extended" -n 2 --dist loadfile --no-loadscope-reorder)
if [[ "${1:-}" == "--extended" ]]; then
    shift
    marks=(-m "extended" -n 2 --dist loadfile --no-loadscope-reorder)
elif [[ "${1:-}" == "--fast" ]]; then
    shift
    marks=(-m "not slow and not subprocess and not extended" -n 2 --dist loadfile --no-loadscope-reorder)
    export XLA_FLAGS="${XLA_FLAGS:-} --xla_backend_optimization_level=0"
fi
scripts/setup.sh --dev
.venv/bin/ruff check .
# no reaching into another object's private members inside the package (tests may: they poke at internals)
.venv/bin/ruff check --select SLF001 playground
# types are checked beside the tests; the verdict is printed after theirs, and either failing fails the run. mypy
# keeps its cache outside the checkout, so a fresh clone or a new worktree starts from the last run's instead of
# taking a core from the tests for a cold check (mypy compares each module's hash, so entries are reused only
# where the code is the same). MYPY_CACHE_DIR set by the caller wins.
types_log=$(mktemp)
MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/playground-dev/mypy}" .venv/bin/mypy > "$types_log" 2>&1 &
types_pid=$!
trap 'kill "$types_pid" 2> /dev/null || true; rm -f "$types_log"' EXIT
tests_status=0
.venv/bin/python -m pytest --durations=15 "${marks[@]}" "$@" || tests_status=$?
types_status=0
wait "$types_pid" || types_status=$?
cat "$types_log"
(( types_status == 0 )) || echo "mypy found type errors (above)" >&2
(( tests_status == 0 && types_status == 0 )) || exit $(( tests_status ? tests_status : types_status ))
