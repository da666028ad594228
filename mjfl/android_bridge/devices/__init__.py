"""Devices that are not phones."""
