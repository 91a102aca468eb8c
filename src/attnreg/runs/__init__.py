"""Results store, sweeps and executors (local process pool, Dask distributed)."""

from attnreg.runs.store import CellResult, ResultsStore, cell_key

__all__ = ["CellResult", "ResultsStore", "cell_key"]
