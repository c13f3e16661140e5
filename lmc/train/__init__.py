"""Stage 6, train: a compiled module + data → a trained run directory."""
