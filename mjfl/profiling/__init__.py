"""Device profiling: shifted-exponential fitting and profiling sessions."""
