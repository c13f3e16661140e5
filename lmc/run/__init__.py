"""Running a compiled module: IREE runtime devices, checkpoints, the data-parallel transport."""
