"""The device side: what a device needs to take part, and the devices that are not phones.

- ``protocol``: protocol v1, sans I/O (messages, tensors, codec, sessions, credentials);
- ``connection``: the one asyncio connection runner, serving both ends of a session;
- ``tls``: the devices' TLS context (a lab CA or a pinned certificate);
- ``devices``: the device model (Formula 4 timing, drop-outs, deadlines, trainer cache),
  emulated devices and their worker processes, Ray;
- ``phones``: the adb bridge and the phones attached to one run.
"""
