"""ExecuTorch's runtime and program reader, imported in a device process without its exporter.

executorch 1.5.1 keeps two modules a device needs under the exporter's package:
its runtime bindings (`extension.pybindings.portable_lib`) import
`executorch.exir._warnings` for one decorator, and the program reader that
`validate_program` uses is `executorch.exir._serialize._program`. Importing
either runs `executorch/exir/__init__.py`, which imports the whole exporter
(torch.export, torchao, sympy's solvers): about 2.5 s of CPU in every process,
measured, against 0.4 s for the modules themselves. A device process never
exports, and an emulated fleet starts one every few devices.

`import_device_modules()` imports those modules under a stand-in for the
`executorch.exir` package (the same folder, without its `__init__`), then takes
the stand-in away. The modules it imported stay; a later `import
executorch.exir` runs the real package as usual. It is called once, at the
start of a device process, before any thread that could import the exporter:
a process that exports imports the modules the ordinary way.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types

__all__ = ["import_device_modules"]

_PACKAGE = "executorch.exir"
_DEVICE_MODULES = (
    "executorch.extension.pybindings.portable_lib",
    "executorch.extension.training",
    "executorch.exir._serialize._program",
)


def import_device_modules() -> None:
    """Import the runtime and the program reader without the exporter; a no-op where the exporter is loaded."""
    if _PACKAGE in sys.modules:
        return
    found = importlib.util.find_spec("executorch")
    if found is None or not found.submodule_search_locations:
        return  # not installed: the trainer's own import says so, where one is built
    folder = f"{next(iter(found.submodule_search_locations))}/exir"
    stand_in = types.ModuleType(_PACKAGE)
    stand_in.__path__ = [folder]
    stand_in.__spec__ = importlib.machinery.ModuleSpec(_PACKAGE, None, is_package=True)
    stand_in.__spec__.submodule_search_locations = [folder]
    sys.modules[_PACKAGE] = stand_in
    try:
        for name in _DEVICE_MODULES:
            importlib.import_module(name)
    finally:
        del sys.modules[_PACKAGE]
        executorch = sys.modules.get("executorch")
        if executorch is not None and getattr(executorch, "exir", None) is stand_in:
            del executorch.exir  # the real package takes its place when it is imported
