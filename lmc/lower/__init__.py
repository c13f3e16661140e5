"""Stage 4, lower: TypedNet → StableHLO module text (the ABI, the forward walk and the
derived backward, in-place ties, the spectral projection)."""
