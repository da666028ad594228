"""Attached phones over adb."""
