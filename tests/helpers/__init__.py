"""Helpers shared by test modules and scripts/ (never imported from one test module into another)."""
