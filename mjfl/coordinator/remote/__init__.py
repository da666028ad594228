"""The remote side."""
