"""The run driver."""
