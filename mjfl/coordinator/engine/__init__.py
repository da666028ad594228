"""The engine: the one multi-job round loop, and what it is made of.

- ``engine``: every job's loop, concurrently: plan, train, collect, FedAvg, evaluate,
  learn, tell, stop;
- ``events``: the one stream of run events it tells its observers;
- ``fleet``: the Fleet interface and the engine's task types;
- ``clock``: wall time and virtual time (the engine has no simulation branch);
- ``fedavg``: FedAvg and the checks an update passes before it;
- ``budget``: a job's round budget R_m from earlier runs (Formula 10).
"""
