"""Shared fixtures: the binary under test, the repository's committed records, the data folder."""
import shutil
import subprocess
from pathlib import Path

import pytest

import qeval

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def binary():
    """The qeval binary: $QEVAL_BINARY (python/run_tests.sh sets it to the build's), else the lookup."""
    try:
        return qeval.find_binary()
    except qeval.QevalError as e:
        pytest.skip(f"no qeval binary: {e.message}")


@pytest.fixture(scope="session")
def repo():
    return REPO


@pytest.fixture(scope="session")
def data_dir(binary):
    out = subprocess.run([binary, "data-dir"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    path = Path(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else None
    if path is None or not path.is_dir():
        pytest.skip("no shared data folder (qeval data-dir)")
    return path


@pytest.fixture(scope="session")
def has_gnuplot():
    return shutil.which("gnuplot") is not None
