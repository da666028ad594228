"""What a run leaves behind, and where.

- ``records``: runs, rounds, device rounds and refits as plain records (and ``Target``,
  the one definition of "target reached"; ``wall_time``, the one rule from the run clock to the wall clock);
- ``database``: ``Storage``, the SQLite run database that keeps them, a facade over
  ``schema`` (tables, migrations, each table's columns), ``connection`` (opening, the lock,
  transactions) and a module per record type (``runs``, ``rounds``, ``refits``, ``fleet_events``,
  ``provenance``, ``device_profiles``, ``clocks``);
- ``checkpoints``: each job's model and scheduler after its latest round (resume);
- ``layout``: where a run's output folder keeps its files.
"""
