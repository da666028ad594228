"""The run driver, and what a run is built from.

- ``driver``: the one path from a configuration to recorded, reported runs (and
  profiling sessions);
- ``simulated`` | ``testbed``: the devices of `mjfl simulate` (virtual time) | of
  `mjfl testbed run` and `mjfl profile` (wall time);
- ``preparation``: data, partitions, programs; who holds which shard;
- ``coverage``: what the devices present lack for the jobs, said before a run;
- ``recorder``: storage's observer of the run's events;
- ``calibration``: the profiling session's calibration tasks;
- ``study``: a grid of simulations, each variant reported.
"""
