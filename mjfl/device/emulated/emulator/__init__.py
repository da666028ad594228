"""Emulated devices: protocol v1 clients that train like a phone (docs/testbed.md).

An emulated device connects to the coordinator over a real WebSocket and
does what the Android app does (protocol.md section 11): hello with its
hardware and cached artifacts, stores programs and shards by sha256, trains
every task with the trainers (``mjfl.jobs.trainers``: the task's ExecuTorch
program, or eager PyTorch), answers with the weights and its timing,
heartbeats, and reconnects with exponential backoff when the connection is
lost. Impersonating a profiled phone, it also takes that phone's time: each
round is stretched to a time drawn from the profile's Formula 4 model for the
task's epochs and its shard size (the device model, ``devices/device_model.py``:
the same Formula 4 draw, drop-out and deadline rules as a simulated device);
when training took less, the device waits the rest before answering. With
each result it reports a modelled energy in ``device_state``
(``device_model.modelled_energy``: the profile's ``power_w`` over the round's
compute time, the drawn one when it impersonates a phone), where a phone
reports one measured from its battery.

Where training runs. Training is CPU-bound and the ExecuTorch runtime holds
the GIL for a whole training step, so it must never run in the
coordinator's process. ``run_emulated_fleet`` spreads devices over worker
processes; in each process the devices share one ``TrainingLane``, a single
training thread with its trainer cache: they train one at a time there, and
the event loop keeps serving every device's messages and heartbeats between
steps. More threads would not train faster (the GIL), only more processes
do, so devices of different processes really train in parallel.

Each connection is served by the connection runner
(``device/connection.py``), the same one the coordinator's server uses.

The rooms, each one noun:

- ``lane``: ``TrainingLane``, the training thread a worker's devices share
  (batched: the micro-batcher of ``devices/microbatch.py`` on that thread);
- ``artifacts``: ``ArtifactStore``, programs and shards by sha256;
- ``backoff``: ``Backoff``, the reconnect delays;
- ``device``: ``EmulatedDevice``, one device's connection, session and
  reconnects, and ``devices_running`` for devices in this event loop;
- ``task``: one task as a device answers it, from arrival to result or error;
- ``fleet``: ``run_emulated_fleet`` and ``EmulatedFleet``, the parent's
  handle on devices in worker processes;
- ``worker``: what runs inside one worker process.
"""
