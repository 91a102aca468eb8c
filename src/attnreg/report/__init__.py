"""The report: every study's quick profile (or stored results) on one self-contained page."""
