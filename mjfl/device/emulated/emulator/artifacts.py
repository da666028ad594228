"""Where emulated devices keep the programs and shards they were given (protocol.md section 6)."""

from __future__ import annotations

import numpy as np

from mjfl.device.protocol import Provision

__all__ = ["PROCESS_STORE", "ArtifactStore"]


class ArtifactStore:
    """Programs and shards by sha256, kept for the process lifetime (protocol.md section 6).

    Devices of one process share the bytes; each device lists only what it
    was given itself.
    """

    def __init__(self) -> None:
        self.programs: dict[str, bytes] = {}
        self.shards: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def keep(self, provision: Provision) -> None:
        if provision.program is not None:
            self.programs[provision.program.sha256] = bytes(provision.program.data)
        if provision.shard is not None:
            # Copies: the received views are read-only and would pin the whole message.
            self.shards[provision.shard.sha256] = (np.array(provision.shard.x), np.array(provision.shard.y))

    def has(self, sha256: str) -> bool:
        return sha256 in self.programs or sha256 in self.shards


PROCESS_STORE = ArtifactStore()
"""The store of this process, which its devices share unless given their own."""
