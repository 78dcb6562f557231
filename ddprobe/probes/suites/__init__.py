"""Bundled probe suites (data files: one JSON document per suite)."""
