"""Shared test helpers (imported by tests; not tests themselves)."""
