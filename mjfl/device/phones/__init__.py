"""Phones attached over adb.

- ``adb``: the adb server's host protocol: list phones, read their facts, install the
  app, reverse a port, start the app, copy its log;
- ``attached``: the attached phones of one run: prepared, pointed at the coordinator,
  and kept pointed as they come and go;
- ``selftest``: the first-day check on one phone: the golden set pushed, the app's
  self-test started and its lines read back.
"""
