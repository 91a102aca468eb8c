"""Shared test settings."""

import os

# scikit-learn's check_array_api_input runs only with SciPy's array-API mode on; set it before
# scipy is imported so parametrize_with_checks runs every check instead of skipping one.
os.environ.setdefault("SCIPY_ARRAY_API", "1")

import matplotlib

matplotlib.use("Agg")
