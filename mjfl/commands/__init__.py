"""The commands of `mjfl`, one module each: what `cli.py` calls once it has parsed the arguments.

A command checks its arguments, chooses its devices and clock, and hands
them to the run driver (``mjfl.coordinator.run.driver``), or runs a benchmark.
"""
