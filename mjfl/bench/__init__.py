"""The benchmarks, and the tools that only benchmarks and tests use.

Every benchmark is one module with one entry point, ``run_<module>_bench(...,
json_path, console) -> figures``, which `mjfl bench <module>` calls: it checks
its arguments (a ``UserError`` naming the option), measures, prints a table on
``console`` and writes the figures it returns as JSON to ``json_path``.

Benchmarks:

- ``schedulers`` (`mjfl bench schedulers`): plan latency (median, p95) and
  plan cost (mean TotalCost, Formula 8) of every scheduler on synthetic
  fleets, with each member's share of Meta-Greedy's decisions.
- ``trainers`` (`mjfl bench trainers`): the time of one training step in
  ExecuTorch's runtime against eager PyTorch, per zoo model, and the ratio
  against its goal.
- ``programs`` (`mjfl bench programs`): each zoo model's training program
  at the paper's jobs: its size and the memory the runtime plans for it, at
  the job's batch size and at the config's limit.
- ``coordinator`` (`mjfl bench coordinator`): the real-time coordinator on
  loopback: its overhead per round, broadcast throughput, and the heartbeat
  p99 over 1,000 idle connections.
- ``dashboard`` (`mjfl bench dashboard`): the dashboard page's load of a
  finished run of 1,000 devices in headless Debian Chromium (goal <= 1 s),
  the server's time for the run's JSON and its size.
- ``scale`` (`mjfl bench scale`): device-trainings per second and
  coordinator CPU per training of emulated fleets of 20 to 500 devices, in
  local worker processes and on Ray.
- ``fuzz`` (`mjfl bench fuzz`): the protocol decoder and sessions under the
  mutation fuzzer; ``unhandled`` must be 0.
- ``faults`` (`mjfl bench faults`): the fault suite: devices killed
  mid-task, a bad network, the coordinator SIGKILLed and resumed, a full
  disk; every target reached, no round lost or repeated.
- ``serve`` (`mjfl bench serve`): the lab service's makespan of runs sharing
  the fleet round by round against fixed device sets and against one
  `testbed run` after another, in one run; submit latency with 1,000
  devices connected; the service's memory after 10 and 100 runs.
- ``soak`` (`mjfl bench soak`, with ``soak_fleet`` and ``soak_checks``):
  the lab service for an hour with JVM and emulated device processes
  killed and started again and runs submitted all along: its memory and
  descriptors and the JVM's over time, rounds lost, disconnects without a
  cause.

Tools:

- ``output``: what every benchmark does with its figures: the table, the
  JSON file, the log file beside it.

The test-only tooling the benchmarks share with the tests (the echo trainer,
the fault proxy, the protocol fuzzer) is its own package, ``mjfl.testkit``.

The package sits below the command line and above the coordinator
(pyproject.toml, ``tool.importlinter``): the runtime (``mjfl.coordinator``,
``mjfl.device``, ``mjfl.jobs``) never imports it. It imports nothing
here, 
"""
