"""What people read after (and during) a run, computed from its records alone.

- ``targets``: when a job and a group reached the target, the rule every figure counts from (pure);
- ``outcomes``: a job's outcome, a run's summary, several runs gathered (pure);
- ``energy``: each job's and the group's energy to target, each device's energy (pure);
- ``runs``: the finished runs of output folders, read from their databases;
- ``files``: summary.json, rounds.csv, energy.csv, the report's JSON;
- ``plots``: accuracy against run time, Meta-Greedy's winners;
- ``tables``: the paper's Tables 4-5, for one run per method or many gathered;
- ``paper``: the paper's own figures, and which of our jobs they compare with;
- ``live``: the live view, an observer of the run's events;
- ``report``: the report steps, at the end of a run and for `mjfl report` / `mjfl study`.
"""
