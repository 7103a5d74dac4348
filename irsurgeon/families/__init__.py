"""families: one folder per draft family, and their registry (registry.py). Imports every folder below flows/; no family imports another."""
