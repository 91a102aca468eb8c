"""Shared test settings."""

import os

# scikit-learn's check_array_api_input runs only with SciPy's array-API mode on; set it before
# scipy is imported so parametrize_with_checks runs every check instead of skipping one.
os.environ.setdefault("SCIPY_ARRAY_API", "1")

import matplotlib
import pytest
from toy_plugin import install

matplotlib.use("Agg")


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy study (``tests/toy_plugin.py``) registered for this test and the processes it
    starts."""
    yield from install(tmp_path, monkeypatch)
