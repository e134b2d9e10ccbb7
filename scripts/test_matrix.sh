#!/usr/bin/env bash
# Run lazyxla's default test suite against one torch/JAX pair in a throwaway venv.
#
#   scripts/test_matrix.sh TORCH_VERSION [JAX_VERSION]     e.g. scripts/test_matrix.sh 2.15.0 0.10.2
#
# The venv lives in $LAZYXLA_MATRIX_DIR (default: $TMPDIR or /tmp, under lazyxla-matrix/),
# one per pair, and is reused by a second run of the same pair (only pytest runs again:
# lazyxla is installed editable from this checkout). Delete the folder to start afresh.
# torch comes from the package index as published: on Linux that is a CUDA build with
# its nvidia-* wheels (several GB); the tests run on CPU all the same. Extra wheels,
# e.g. downloaded ahead with `pip download torch==X -d DIR`, are used from
# $LAZYXLA_MATRIX_WHEELS when set. Extra pytest arguments go in $PYTEST_ARGS.
# Prints the pytest summary; the full log is pytest.log in the venv's folder.
# Exit status: pytest's.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
    echo "usage: $0 TORCH_VERSION [JAX_VERSION]   (e.g. $0 2.15.0 0.10.2)" >&2
    exit 2
fi
torch_version=$1
jax_version=${2:-0.10.2}
repo=$(cd "$(dirname "$0")/.." && pwd)
root=${LAZYXLA_MATRIX_DIR:-${TMPDIR:-/tmp}/lazyxla-matrix}
venv=$root/torch-$torch_version-jax-$jax_version
python=${PYTHON:-python3}

# A site-wide pip constraint file may cap torch (this project's machines ship one that
# pins the local wheel's release); a matrix run asks for an exact version, so it runs
# without constraints: /dev/null replaces the file (an empty PIP_CONSTRAINT would leave
# it in force). The rest of the pip configuration (indexes, find-links) still applies.
export PIP_CONSTRAINT=/dev/null
export PIP_DISABLE_PIP_VERSION_CHECK=1
find_links=()
if [[ -n "${LAZYXLA_MATRIX_WHEELS:-}" ]]; then
    find_links=(--find-links "$LAZYXLA_MATRIX_WHEELS")
fi

# The test and bench extras, as CI installs them (tests/test_bench.py draws charts).
extras="test,bench"
if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" - "$torch_version" "$jax_version" 2>/dev/null <<'EOF'
import sys
import jax, matplotlib, pytest, torch  # noqa: F401  (a venv without the extras is rebuilt)
sys.exit(torch.__version__.split("+")[0] != sys.argv[1] or jax.__version__ != sys.argv[2])
EOF
then
    echo "== creating $venv (torch $torch_version, jax $jax_version)"
    rm -rf "$venv"
    mkdir -p "$root"
    "$python" -m venv "$venv"
    # One resolve for the whole set: a torch or JAX outside pyproject's pins fails here,
    # naming the conflict, instead of pip quietly installing another release.
    "$venv/bin/python" -m pip install -q "${find_links[@]}" \
        "torch==$torch_version" "jax==$jax_version" "jaxlib==$jax_version" -e "$repo[$extras]"
fi

"$venv/bin/python" -c 'import torch, jax, lazyxla
print(f"== torch {torch.__version__}, jax {jax.__version__}, lazyxla from {lazyxla.__file__}")'
cd "$repo"
status=0
# shellcheck disable=SC2086  # PYTEST_ARGS is a list of words
"$venv/bin/python" -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-} >"$venv/pytest.log" 2>&1 || status=$?
# The failures' one-line reasons and the closing count line.
grep -E '^(FAILED|ERROR) ' "$venv/pytest.log" || true
tail -n 1 "$venv/pytest.log"
echo "== full log: $venv/pytest.log (exit $status)"
exit $status
