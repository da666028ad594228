"""Test-only tooling: what the tests and the benchmarks use to put the coordinator under test, never part of a run.

- ``echo``: ``EchoTrainer``, devices that answer without training (the
  coordinator under test, not learning).
- ``faultproxy``: a user-space TCP proxy between devices and coordinator
  that delays, caps bandwidth, drops, cuts and reorders.
- ``fuzzer``: the seeded mutation fuzzer of protocol v1.

The package sits below the benchmarks and above the coordinator
(pyproject.toml, ``tool.importlinter``): the runtime (``mjfl.coordinator``,
``mjfl.device``, ``mjfl.jobs``) never imports it. It imports nothing here, so
a worker process that unpickles ``echo_trainer`` loads only ``echo``.
"""
