"""The remote side: phones and emulated devices over WebSockets, in three parts with one owner each.

- ``server``: the WebSocket server: handshake, TLS, credentials, limits; it
  registers and unregisters devices;
- ``registry``: who is connected, their facts and profiles, their tasks in flight,
  waiting for N devices, join and leave;
- ``fleet``: the remote fleet, the engine's Fleet: tasks out, results in, through
  the registry;
- ``keys``, ``certs``: the enrolled devices' key store and device key files; the lab CA.
"""
