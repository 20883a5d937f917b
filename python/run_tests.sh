#!/usr/bin/env bash
# The Python package's tests (python/tests, pytest), as ctest's `python` test runs them:
#   python/run_tests.sh [VENV]      # VENV: default build/python-venv
# Makes (once) a virtual environment over Debian's python3 with its system packages, so that
# python3-torch (scripts/setup) is the torch the Trainer callback test trains with, installs
# pandas, pytest and transformers from PyPI into it when they are missing, installs this package
# (pip install ./python) and runs pytest against the qeval binary in $QEVAL_BINARY (default:
# build/qeval). Exits 77 (ctest: skipped) with "SKIPPED: why" when the environment cannot be had
# (no python3-venv, pandas and pytest not installable); without transformers or torch the Trainer
# test alone reports skipped (pytest -rs says so). A failing test fails.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$(realpath -m "${1:-${QEVAL_PYTHON_VENV:-$root/build/python-venv}}")"
export QEVAL_BINARY="${QEVAL_BINARY:-$root/build/qeval}"
skip() { echo "SKIPPED: $*"; exit 77; }
[[ -x "$QEVAL_BINARY" ]] || { echo "no qeval binary at $QEVAL_BINARY (scripts/build)"; exit 1; }

# Debian's python3 (its python3-torch), not another python3 first on PATH.
python=/usr/bin/python3
[[ -x $python ]] || python="$(command -v python3)" || skip "no python3"
if [[ ! -x "$venv/bin/python" ]]; then
  if ! "$python" -c "import ensurepip, venv" 2>/dev/null; then
    sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo -n"
    echo "python/run_tests.sh: installing python3-venv" >&2
    { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv; } >&2 ||
      skip "python3-venv is not installed and could not be installed"
  fi
  rm -rf "$venv"
  "$python" -m venv --system-site-packages "$venv" >&2 || { rm -rf "$venv"; skip "could not create a virtual environment in $venv"; }
fi
# pandas and pytest are needed; transformers (4.46.3: the newest that runs on Debian's torch 1.13,
# bench/moe_ssm_hf_eager.py) and accelerate only by the Trainer tests, which pytest then reports
# skipped. numpy < 2 keeps the numpy that torch 1.13 was built against.
install() {  # install REQUIREMENT... unless IMPORTS import; 1 when they cannot be had
  local imports="$1"; shift
  "$venv/bin/python" -c "import $imports" 2>/dev/null && return 0
  echo "python/run_tests.sh: pip install $*" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@" >&2
}
install "pandas, pytest" "pandas>=1.5,<2.3" "numpy<2" "pytest" || skip "could not install pandas and pytest from PyPI"
install "transformers, accelerate" "transformers==4.46.3" "accelerate==1.0.1" "numpy<2" ||
  echo "python/run_tests.sh: could not install transformers from PyPI: the Trainer tests will be skipped" >&2
"$venv/bin/python" -c "import torch" 2>/dev/null || echo "python/run_tests.sh: no torch (python3-torch): the callback test will be skipped" >&2
# The package as a user installs it (pure Python; --no-build-isolation: setuptools from the venv).
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation --force-reinstall \
  "$root/python" >&2 || { echo "pip install ./python failed"; exit 1; }
# A copy of the binary: a build relinking build/qeval while the tests run cannot pull it away.
bin_dir="$(mktemp -d /tmp/qeval-python-tests.XXXXXX)"
trap 'rm -rf "$bin_dir"' EXIT
cp "$QEVAL_BINARY" "$bin_dir/qeval" || exit 1
export QEVAL_BINARY="$bin_dir/qeval"
cd "$root/python/tests" || exit 1
# -p no:cacheprovider, no:hypothesispytest: nothing written into the source tree; -rs: say why a test skipped.
"$venv/bin/python" -m pytest -p no:cacheprovider -p no:hypothesispytest -rs -v "${@:2}" .
