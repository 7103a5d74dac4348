"""Helpers shared by test modules (importable as `helpers.*`: conftest.py puts tests/ on sys.path); not tests themselves."""
