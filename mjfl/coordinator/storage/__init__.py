"""What a run leaves behind, and where.

- ``records``: runs, rounds, device rounds and refits as plain records (and ``Target``,
  the one definition of "target reached");
- ``database``: the SQLite run database that keeps them;
- ``checkpoints``: each job's model and scheduler after its latest round (resume);
- ``layout``: where a run's output folder keeps its files.
"""
