"""The coordinator: everything that runs FL jobs over a fleet, in rooms that only import down.

- ``run``: the run driver (one path for simulate, testbed run and profile), the
  devices each command chooses, job preparation, the recorder, studies;
- ``remote`` | ``results``: the WebSocket server, the device registry and the remote
  fleet | outcomes, files, plots, tables, the live view, the report steps;
- ``engine``: the one round loop, its events, the Fleet interface, clocks, FedAvg;
- ``config``: the run configuration;
- ``storage``: records, the run database, checkpoints, where a run's files go.

docs/architecture.md draws them.
"""
