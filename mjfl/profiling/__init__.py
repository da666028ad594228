"""Device profiling: Formula 4 fits, profile files, and the profile a device is planned with.

- ``fit``: shifted-exponential fitting with intervals and a goodness of fit, and
  online refits;
- ``profiles``: device profiles and the profile file format;
- ``planning``: the parameters a device is planned with when nobody measured it;
- ``observations``: what a profiling session measured, fitted into profiles;
- ``report``: the profile table and each device's CDF plot.
"""
