"""Identifiers shared across the package."""

from typing import NewType

DeviceId = NewType("DeviceId", str)
JobId = NewType("JobId", str)
