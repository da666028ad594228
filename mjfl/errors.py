"""The one exception tree of mjfl: every exception class the package defines is here.

    MjflError
    ├── UserError              the user's fault: bad config, data or arguments; one clear line
    │   ├── ConfigError        a run configuration field is invalid (names the field)
    │   ├── DataError          a data set or database file is missing or malformed (names the file)
    │   ├── ProgramError       an exported training program is corrupt or mismatched
    │   ├── ModelError         a model cannot become a training program: names the
    │   │                      operator, the module and what to use instead
    │   ├── FitError           too few or invalid observations to fit a profile
    │   ├── ProfileError       a profile record is invalid
    │   ├── UnknownRunError    no such run in the database
    │   ├── PhoneError         an attached phone cannot be used: no adb server, no phone,
    │   │                      unauthorized, an install that failed (names the phone)
    │   └── Refusal            the lab service refuses a request: a code a script reads,
    │                          the field at fault, the HTTP status (docs/lab-api.yaml)
    ├── PeerError              a device's fault: close that device's session, keep running
    │   ├── ProtocolError      a malformed, oversized, out-of-order or unknown message
    │   ├── SessionClosed      sending on a session that has ended
    │   └── DeviceFailure      a task came back with no usable update (lost, late, rejected):
    │                          recorded as data in the round, never fatal to the run
    ├── EncodeError            a message cannot be sent as given: it breaks a rule the
    │                          receiver checks (non-finite weights, over the peer's size limit)
    └── RunError               a run cannot go on (e.g. no device connected in time)
        └── StorageError       the database refused a write
            └── DuplicateRoundError  a finished round recorded twice

Our own bugs are assertions, not members of this tree. ``FitError`` and
``ProfileError`` are also ``ValueError`` and ``UnknownRunError`` a
``LookupError``, as the standard library would raise for the same input.
"""

from __future__ import annotations


class MjflError(Exception):
    """Base of every error mjfl raises on purpose."""


# -- the user's fault -----------------------------------------------------------


class UserError(MjflError):
    """Bad input from the user; the message names the field, file or argument."""


class ConfigError(UserError):
    """A run configuration field is invalid."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"config field '{field}': {problem}")
        self.field = field
        self.problem = problem


class DataError(UserError):
    """A data set or database file is missing or malformed."""


class ProgramError(UserError):
    """An exported training program is corrupt or does not match the model."""


class ModelError(UserError):
    """A model has an operator the export form has no rule for (or uses one it cannot train).

    ``operator`` is what the user wrote (``nn.Upsample``, ``F.softmax``, ``x.view``),
    ``module`` the qualified name of the module it is in (``features.3.conv``),
    ``instead`` what to use instead.
    """

    def __init__(self, operator: str, module: str, problem: str, instead: str) -> None:
        super().__init__(f"model operator {operator} in {module}: {problem}; instead: {instead}")
        self.operator = operator
        self.module = module
        self.problem = problem
        self.instead = instead


class FitError(UserError, ValueError):
    """Observations that cannot be fitted to Formula 4 (profiling/fit.py).

    Fewer than two observations, non-finite or negative times, non-positive
    epochs or sample counts, mismatched lengths, or observations that are all
    equal (the scale would be zero).
    """


class ProfileError(UserError, ValueError):
    """A device profile field (in a file or the database) has an invalid value; ``field`` names it."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"profile field '{field}': {problem}")
        self.field = field
        self.problem = problem


class UnknownRunError(UserError, LookupError):
    """No run with this id in the database (e.g. a mistyped ``--resume`` id)."""


class PhoneError(UserError):
    """An attached phone cannot be used over adb; the message names the phone and what to do."""


class Refusal(UserError):
    """The lab service refuses a request (docs/lab-api.yaml).

    ``code`` is what a script reads (``config_invalid``, ``fleet_too_small``,
    ``unauthorized`` ...), ``field`` the config field or request part at
    fault if any, ``status`` the HTTP status the API answers with.
    """

    def __init__(self, code: str, message: str, *, status: int = 400, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.field = field

    def __str__(self) -> str:
        return f"{self.message} ({self.code})"

    def document(self) -> dict[str, object]:
        """The refusal as the API sends it: ``{"error": {"code", "message", "field"?}}``."""
        error: dict[str, object] = {"code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        return {"error": error}


# -- the device's fault ---------------------------------------------------------


class PeerError(MjflError):
    """A device misbehaved; its session is closed, everything else goes on."""


class ProtocolError(PeerError):
    """A message violates the wire protocol; ``code`` is the bye code (docs/protocol.md section 8)."""

    def __init__(self, reason: str, *, code: str = "protocol_error") -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


class SessionClosed(PeerError):
    """Raised by a session's send method once the session is closed."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"session closed ({code}): {reason}")
        self.code = code
        self.reason = reason


class DeviceFailure(PeerError):
    """A device did not return a usable update (lost, late, or rejected).

    Failures are data: a fleet raises this from ``run_task``, and the engine
    records it in the round and feeds it to the scheduler. ``status`` is
    "failed" (no answer in time) or "rejected" (an answer that was not a valid
    update); ``after_s`` is how long the coordinator waited to learn it.
    """

    def __init__(self, device: str, reason: str, *, status: str = "failed", after_s: float = 0.0) -> None:
        super().__init__(f"{device}: {reason}")
        self.device = device
        self.reason = reason
        self.status = status
        self.after_s = after_s


# -- the sender's mistake ---------------------------------------------------------


class EncodeError(MjflError):
    """A message cannot be encoded as given: the receiver would reject it.

    Raised on the sending side before anything is written, so a bad message
    never reaches the wire (e.g. weights holding NaN, a message over the
    peer's announced size limit, a field out of its range).
    """


# -- the run's end ----------------------------------------------------------------


class RunError(MjflError):
    """A run cannot continue."""


class StorageError(RunError):
    """The run database refused a write (a constraint, an inconsistent record)."""


class DuplicateRoundError(StorageError):
    """A (run, job, round) that is already recorded was recorded again.

    Resume must never repeat a finished round, so this is never an overwrite.
    """


def ours(exc: BaseException) -> MjflError | None:
    """The error of ours that ``exc`` is, or the first among a task group's exceptions however deep (None: none)."""
    if isinstance(exc, MjflError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = ours(inner)
            if found is not None:
                return found
    return None
