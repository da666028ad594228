"""Device scheduling: the cost model, the schedulers and Meta-Greedy."""
