"""mjfl: a testbed for multi-job federated learning on real and emulated phones."""

__version__ = "0.1.0"
