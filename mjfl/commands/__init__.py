"""The commands of `mjfl`, one module each: what `mjfl.cli` calls once it has parsed the arguments.

A command checks its arguments, calls the room that does the work (the run
driver with the devices it chooses, the results package, the phones, the
key store) and prints what comes back. Benchmarks are ``mjfl.bench``'s.
"""
