"""`python -m spsim.cli`: the `spsim` command."""

from spsim.cli import main

main()
