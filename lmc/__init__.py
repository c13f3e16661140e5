"""lmc: declarative deep-learning compiler — YAML nets → StableHLO train steps → IREE."""
__version__ = "0.1.0"
