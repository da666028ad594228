"""A secret that a command prints alone on stdout, for a script or a file: `mjfl lab researcher add NAME >
alice.token`, `mjfl devices enroll NAME > pixel.secret`.

The shell makes such a file before the command starts, with the mode its
umask leaves (0644 under the usual 022): anyone on the machine could read
the secret. ``owner_only_stdout`` makes it readable by its owner only, before
the secret is issued, so no secret is ever written where others read it;
a pipe, a terminal or /dev/null is left as it is.
"""

from __future__ import annotations

import os
import stat
import sys

from mjfl.errors import UserError


def owner_only_stdout() -> None:
    """Make stdout, when it is a regular file, readable and writable by its owner only (chmod go-rwx).

    Call it before the secret exists: a file that cannot be made so (another user's) is a UserError, and
    nothing was issued.
    """
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a file descriptor (a test's capture)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode) or not stat.S_IMODE(mode) & 0o077:
        return
    try:
        os.fchmod(fd, stat.S_IMODE(mode) & 0o700)
    except OSError as exc:
        raise UserError(
            f"stdout is a file others can read, and it cannot be made this user's alone ({exc.strerror}):"
            " the secret is not issued; write it to a file of your own"
        ) from None
