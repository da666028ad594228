"""A model of the user's own: a factory in a file or an importable module.

`model = "models.py:TinyMobileNet"` names a file (beside the config; the
config reader makes the path absolute and records the file's sha256) and
`model = "package.module:factory"` an importable module. Either is called as
`factory(input_shape, num_classes, **model_args)` and must return an
`nn.Module` whose `forward(x)` maps an (N, C, H, W) batch to (N, K) logits.

Importing a file runs its code: where that code is a researcher's, the lab
imports it only in a bounded child process (docs/security.md).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mjfl.errors import ConfigError
from mjfl.jobs.base import FACTORY, ModelSpec, is_factory_file

__all__ = ["build_custom", "forbid_imports", "load_factory", "source_file"]

_LOADING = threading.Lock()
_FORBIDDEN: str | None = None  # why this process must never import a model's code (forbid_imports)


def forbid_imports(why: str) -> None:
    """From now on, this process never imports a model's code: loading a factory is an internal error.

    The lab's service and its shared child say so at start (a researcher's
    model runs only in its own bounded child, ``coordinator/lab/sandbox.py``):
    a path that would run it there is a bug, caught here, not run.
    """
    global _FORBIDDEN  # one flag for the whole process, set once
    _FORBIDDEN = why


def source_file(name: str) -> Path | None:
    """The file a factory string names, or None for a module factory."""
    if not is_factory_file(name):
        return None
    m = FACTORY.match(name)
    assert m is not None
    return Path(m.group("where"))


def load_factory(name: str, sha256: str = "") -> Callable[..., Any]:
    """The callable a factory string names; `ConfigError` naming 'model' when it cannot be had.

    A file is imported once per process and content (a module named by its
    hash), with its folder on `sys.path` while it runs so that helper files
    beside it import; when `sha256` is given the file must still hash to it.
    """
    if _FORBIDDEN is not None:
        raise RuntimeError(f"a model's code ({name}) was about to run in {_FORBIDDEN}, which runs none")
    m = FACTORY.match(name)
    if m is None:
        raise ConfigError("model", f"{name!r} is not a factory ('file.py:Factory' or 'package.module:factory')")
    where, attr = m.group("where"), m.group("attr")
    if is_factory_file(name):
        path = Path(where)
        if not path.is_file():
            raise ConfigError("model", f"no such file {path}")
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if sha256 and digest != sha256:
            raise ConfigError("model", f"{path} changed since the run was configured (sha256 {digest[:12]}, not {sha256[:12]})")
        module_name = f"mjfl_model_{digest[:16]}_{path.stem}".replace("-", "_")
        with _LOADING:
            module = sys.modules.get(module_name)
            if module is None:
                spec = importlib.util.spec_from_file_location(module_name, path)
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                folder = str(path.resolve().parent)
                sys.path.insert(0, folder)
                try:
                    sys.modules[module_name] = module
                    spec.loader.exec_module(module)
                except MemoryError:
                    sys.modules.pop(module_name, None)
                    raise
                except Exception as exc:  # noqa: BLE001 - the user's code: one clear error
                    sys.modules.pop(module_name, None)
                    raise ConfigError("model", f"importing {path} failed: {type(exc).__name__}: {exc}") from None
                finally:
                    try:
                        sys.path.remove(folder)
                    except ValueError:
                        pass
    else:
        try:
            module = importlib.import_module(where)
        except Exception as exc:  # noqa: BLE001
            raise ConfigError("model", f"cannot import {where}: {type(exc).__name__}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError("model", f"{where} has no callable {attr!r}")
    return factory  # type: ignore[no-any-return]


def build_custom(spec: ModelSpec) -> Any:
    """`factory(input_shape, num_classes, **model_args)`, checked to be an `nn.Module`."""
    from torch import nn

    factory = load_factory(spec.name, spec.sha256)
    try:
        model = factory(tuple(spec.input_shape), spec.num_classes, **spec.kwargs)
    except MemoryError:
        raise  # out of memory is the process's state, not the model's error: the caller knows its limits
    except Exception as exc:  # noqa: BLE001 - the user's code: one clear error
        raise ConfigError("model", f"{spec.name}({spec.input_shape}, {spec.num_classes}, **model_args) raised "
                          f"{type(exc).__name__}: {exc}") from None
    if not isinstance(model, nn.Module):
        raise ConfigError("model", f"{spec.name} returned a {type(model).__name__}, not an nn.Module")
    if spec.dropout is not None:
        for m in model.modules():
            if isinstance(m, nn.Dropout):
                m.p = spec.dropout
    return model
