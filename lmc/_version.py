"""lmc's version (here, so a stage can read it without importing the package's API)."""
__version__ = "0.1.0"
