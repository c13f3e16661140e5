"""`python -m lmc …` runs the CLI (the same as the `lmc` script)."""
from .cli import main

main()
