"""Device side: the wire protocol, emulated devices and attached phones."""
