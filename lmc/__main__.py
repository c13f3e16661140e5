"""`python -m lmc …` runs the CLI (the same as the `lmc` script)."""
from lmc.cli.app import main

main()
