"""Tiny, seeded, valid models and checkpoints for tests (irsurgeon's own and its users')."""
