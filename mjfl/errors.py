"""The one exception tree of mjfl.

    MjflError
    ├── UserError            the user's fault: bad config, data or arguments.
    │   ├── ConfigError      a run configuration field is invalid (names the field)
    │   ├── DataError        a data set file is missing or malformed (names the file)
    │   ├── ProgramError     an exported training program is corrupt or mismatched
    │   ├── FitError         too few or invalid observations to fit a profile (profiling/fit.py)
    │   ├── ProfileError     a profile record is invalid (profiling/profiles.py)
    │   └── UnknownRunError  no such run in the database (coordinator/storage.py)
    ├── PeerError            a device's fault: close that device's session, keep running
    │   ├── ProtocolError    a malformed, oversized, out-of-order or unknown message
    │   └── SessionClosed    sending on a session that has ended (android_bridge/session.py)
    └── RunError             a run cannot go on (e.g. no device connected in time)
        └── StorageError     the database refused a write (coordinator/storage.py)
            └── DuplicateRoundError  a finished round recorded twice

Our own bugs are assertions, not members of this tree.
"""


class MjflError(Exception):
    """Base of every error mjfl raises on purpose."""


class UserError(MjflError):
    """Bad input from the user; the message names the field, file or argument."""


class ConfigError(UserError):
    """A run configuration field is invalid."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"config field '{field}': {problem}")
        self.field = field
        self.problem = problem


class DataError(UserError):
    """A data set file is missing or malformed."""


class ProgramError(UserError):
    """An exported training program is corrupt or does not match the model."""


class PeerError(MjflError):
    """A device misbehaved; its session is closed, everything else goes on."""


class ProtocolError(PeerError):
    """A message violates the wire protocol."""

    def __init__(self, reason: str, *, code: str = "protocol_error") -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


class RunError(MjflError):
    """A run cannot continue."""
