"""Results store, sweeps and executors (local process pool, Dask distributed)."""

from attnreg.runs.lifecycle import RunInterrupted
from attnreg.runs.store import CellResult, ResultsStore, StoreBusy, StoreError, cell_key

__all__ = ["CellResult", "ResultsStore", "RunInterrupted", "StoreBusy", "StoreError", "cell_key"]
