"""Devices that are not phones, and what they share with simulated ones.

- ``device_model``: one device's round: Formula 4 round times, drop-outs, what a
  deadline does, and the trainers it keeps loaded (simulated devices use it too);
- ``emulator``: emulated devices, protocol v1 clients that train like a phone, and
  the worker processes that host them (a package, one room each);
- ``microbatch``: the batched runtime's gatherer, a turn's tasks trained together per
  model, for simulated devices and emulated ones alike;
- ``ray_cluster``: the same workers (and simulated devices' training) on a Ray cluster;
- ``golden``: the first-day check's golden cases, the Python runtime's answers to short
  tasks of every zoo model, as wire messages for the phones to train.
"""
