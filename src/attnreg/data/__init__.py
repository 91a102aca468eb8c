"""Task samplers, data sets, pattern sets and corruptions (generated or shipped; no downloads)."""
