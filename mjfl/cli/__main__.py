"""`python -m mjfl.cli ...`: the `mjfl` command, as the tests and benchmarks start it."""

from mjfl.cli import main

main()
