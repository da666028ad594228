"""Data sets for FL jobs: read from local files, fitted to a model's input.

:func:`load_dataset` returns a :class:`Dataset` of float32 NCHW images,
normalised per channel with the training set's mean and std, and int64 labels.
Nothing is ever downloaded: the files must already be on disk (docs/data.md
lists the expected names per data set and where they are looked for).

Names:

- ``"digits"``: scikit-learn's bundled 8x8 digits (no files needed), split
  into train/test by a seeded stratified split; the default for demos/tests;
- ``"mnist"``, ``"fashion-mnist"``, ``"emnist-letters"``, ``"emnist-digits"``:
  IDX files (raw or gzipped) with their standard names;
- ``"cifar10"``: the CIFAR-10 python batches;
- ``"npz:PATH"`` or any name ending in ``.npz``: arrays ``x_train``,
  ``y_train``, ``x_test``, ``y_test`` (images NHW, NCHW or NHWC).

Missing files raise one :class:`~mjfl.errors.DataError` naming the expected
files and the directories searched; malformed files raise a ``DataError``
naming the file.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import math
import os
import pickle
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from mjfl.errors import ConfigError, DataError

IDX_NAMES = ("mnist", "fashion-mnist", "emnist-letters", "emnist-digits")
DATASET_NAMES = ("digits", *IDX_NAMES, "cifar10")
"""Built-in data set names; ``npz:PATH`` / ``*.npz`` are accepted as well."""

DATA_DIR_ENV = "MJFL_DATA_DIR"
"""Environment variable giving the default data directory (else ``./data``)."""

FloatArray = NDArray[np.float32]
LabelArray = NDArray[np.int64]


@dataclass(frozen=True, eq=False, repr=False)
class Dataset:
    """A job's data set, ready for training.

    ``train_x``/``test_x`` are float32 ``(N, C, H, W)`` arrays normalised with
    the training set's per-channel mean and std; ``train_y``/``test_y`` are
    int64 class ids in ``[0, num_classes)``. The arrays are read-only, so a
    cached data set can be shared safely.
    """

    train_x: FloatArray
    train_y: LabelArray
    test_x: FloatArray
    test_y: LabelArray
    num_classes: int
    input_shape: tuple[int, int, int]
    name: str

    def __repr__(self) -> str:
        return (
            f"Dataset(name={self.name!r}, train={len(self.train_y)}, test={len(self.test_y)}, "
            f"input_shape={self.input_shape}, num_classes={self.num_classes})"
        )


def load_dataset(
    name: str,
    data_dir: Path | None = None,
    *,
    image_size: int | None = None,
    channels: int | None = None,
    test_fraction: float = 0.2,
    seed: int = 0,
) -> Dataset:
    """Load a data set by name and fit it to a model's input.

    Args:
        name: one of :data:`DATASET_NAMES`, ``"npz:PATH"`` or a ``.npz`` path.
        data_dir: where the files are; default ``$MJFL_DATA_DIR`` or ``./data``.
            Not needed for ``"digits"``.
        image_size: resize images to ``image_size x image_size`` (bilinear,
            antialiased when shrinking); ``None`` keeps the stored size.
        channels: output channels; 1-channel images are replicated to any
            count, 3-channel images become 1 by luma (ITU-R BT.601 weights);
            ``None`` keeps the stored channels.
        test_fraction: share of each class held out for testing when the data
            set has no official test split (``"digits"``, an npz without test
            arrays); ignored otherwise.
        seed: seed of that stratified split.

    Raises:
        DataError: a file is missing or malformed.
        ConfigError: an argument is out of range (naming it).
    """
    if image_size is not None and (isinstance(image_size, bool) or image_size < 1):
        raise ConfigError("image_size", f"must be a positive integer, got {image_size!r}")
    if channels is not None and (isinstance(channels, bool) or channels < 1):
        raise ConfigError("channels", f"must be a positive integer, got {channels!r}")
    if not 0.0 < test_fraction < 1.0:
        raise ConfigError("test_fraction", f"must be in (0, 1), got {test_fraction!r}")
    root = _default_data_dir() if data_dir is None else Path(data_dir)

    if name == "digits":
        x, y = _digits()
        train_x, train_y, test_x, test_y = _stratified_split(x, y, test_fraction, seed)
        num_classes = 10
    elif name in IDX_NAMES:
        train_x, train_y, test_x, test_y = _load_idx_dataset(name, root)
        num_classes = 26 if name == "emnist-letters" else 10
    elif name == "cifar10":
        train_x, train_y, test_x, test_y = _load_cifar10(root)
        num_classes = 10
    elif name.startswith("npz:") or name.endswith(".npz"):
        path = _resolve_npz(name.removeprefix("npz:"), data_dir)
        train_x, train_y, test_x, test_y, num_classes = _load_npz(path, test_fraction, seed)
    else:
        raise ConfigError(
            "dataset", f"unknown data set {name!r}; use one of {DATASET_NAMES}, 'npz:PATH' or *.npz"
        )
    return _fit(name, train_x, train_y, test_x, test_y, num_classes, image_size, channels)


# --- fitting images to a model's input ------------------------------------------------


def _fit(
    name: str,
    train_x: NDArray[Any],
    train_y: LabelArray,
    test_x: NDArray[Any],
    test_y: LabelArray,
    num_classes: int,
    image_size: int | None,
    channels: int | None,
) -> Dataset:
    """Resize, convert channels, normalise with training statistics, freeze."""
    xs: list[FloatArray] = [
        np.asarray(train_x, dtype=np.float32),
        np.asarray(test_x, dtype=np.float32),
    ]
    if image_size is not None:
        xs = [resize_bilinear(x, image_size, image_size) for x in xs]
    stored = xs[0].shape[1]
    out_channels = stored if channels is None else channels
    if stored == 3 and out_channels == 1:
        luma = np.array([0.299, 0.587, 0.114], dtype=np.float32)
        xs = [np.einsum("nchw,c->nhw", x, luma)[:, None] for x in xs]
    elif stored != out_channels and stored != 1:
        raise ConfigError(
            "channels",
            f"cannot turn {stored}-channel images of {name!r} into {out_channels} channels "
            "(supported: 1 -> any by replication, 3 -> 1 by luma)",
        )
    # Statistics come from the training set only and are applied to both
    # splits. Replication comes after, since copies share the statistics.
    mean, std = _channel_stats(xs[0])
    xs = [_normalise(x, mean, std) for x in xs]
    if xs[0].shape[1] != out_channels:
        xs = [np.repeat(x, out_channels, axis=1) for x in xs]
    for arr in xs:
        arr.setflags(write=False)  # frozen, and safe to share between jobs
    train_y.setflags(write=False)
    test_y.setflags(write=False)
    _, c, h, w = xs[0].shape
    return Dataset(xs[0], train_y, xs[1], test_y, num_classes, (c, h, w), name)


def resize_bilinear(x: NDArray[Any], height: int, width: int) -> FloatArray:
    """Resize ``(N, C, H, W)`` images to ``(N, C, height, width)``, deterministically.

    Separable triangle filter on pixel centres (half-pixel convention): the same
    as ``torch.nn.functional.interpolate(mode="bilinear", align_corners=False,
    antialias=True)`` and PIL's bilinear resize, i.e. plain bilinear when
    enlarging and antialiased when shrinking.
    """
    x = np.asarray(x, dtype=np.float32)
    if x.shape[2:] == (height, width):
        return x
    rows = _resize_weights(x.shape[2], height)
    cols = _resize_weights(x.shape[3], width)
    out: FloatArray = np.matmul(rows, np.matmul(x, cols.T))
    return out


def _resize_weights(size_in: int, size_out: int) -> FloatArray:
    scale = size_in / size_out
    support = max(scale, 1.0)
    centres = (np.arange(size_out) + 0.5) * scale
    pixels = np.arange(size_in) + 0.5
    weights = np.clip(1.0 - np.abs(pixels[None, :] - centres[:, None]) / support, 0.0, None)
    return np.asarray(weights / weights.sum(axis=1, keepdims=True), dtype=np.float32)


def _channel_stats(x: FloatArray) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    # One channel at a time with float64 accumulation: exact enough and no
    # float64 copy of the whole set (CIFAR-10 would need 1.2 GB).
    mean = np.array([x[:, c].mean(dtype=np.float64) for c in range(x.shape[1])])
    sq = np.array([np.square(x[:, c]).mean(dtype=np.float64) for c in range(x.shape[1])])
    std = np.sqrt(np.maximum(sq - mean**2, 0.0))
    return mean, np.where(std > 1e-8, std, 1.0)


def _normalise(x: FloatArray, mean: NDArray[np.float64], std: NDArray[np.float64]) -> FloatArray:
    shape = (1, -1, 1, 1)
    out: FloatArray = x - mean.astype(np.float32).reshape(shape)
    out /= std.astype(np.float32).reshape(shape)
    return out


def _stratified_split(
    x: NDArray[Any], y: LabelArray, test_fraction: float, seed: int
) -> tuple[NDArray[Any], LabelArray, NDArray[Any], LabelArray]:
    """Hold out round(test_fraction * n_j) samples of each class j (halves round
    up; at least one stays in training), chosen by ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    test: list[NDArray[np.int64]] = []
    for cls in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == cls))
        take = min(math.floor(test_fraction * members.size + 0.5), members.size - 1)
        test.append(members[:take])
    is_test = np.zeros(y.size, dtype=bool)
    is_test[np.concatenate(test)] = True
    return x[~is_test], y[~is_test], x[is_test], y[is_test]


# --- digits ----------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _digits() -> tuple[NDArray[np.float32], LabelArray]:
    """scikit-learn's 1797 8x8 digits (pixel values 0..16), cached per process.

    Read straight from the CSV that scikit-learn ships, because importing
    ``sklearn.datasets`` costs seconds; ``load_digits`` is the fallback should
    a scikit-learn release move that file.
    """
    table = _bundled_digits_table()
    if table is None:
        from sklearn.datasets import load_digits

        bunch = load_digits()
        x = np.asarray(bunch.data, dtype=np.float32)
        y = np.asarray(bunch.target, dtype=np.int64)
    else:
        x, y = table[:, :64].astype(np.float32), table[:, 64].astype(np.int64)
    x = x.reshape(-1, 1, 8, 8)
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y


def _bundled_digits_table() -> NDArray[np.float64] | None:
    spec = importlib.util.find_spec("sklearn")
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            table = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
            if table.shape == (1797, 65):
                return table
    return None


# --- locating files --------------------------------------------------------------------


def _default_data_dir() -> Path:
    return Path(os.environ.get(DATA_DIR_ENV, "data"))


def _find_files(dataset: str, dirs: list[Path], names: list[str], *, gz: bool) -> list[Path]:
    """Return the paths of ``names`` from the first of ``dirs`` holding all of them.

    With ``gz``, ``NAME.gz`` stands in for a missing ``NAME``.
    """
    for d in dirs:
        found = [_pick(d, n, gz) for n in names]
        if all(p is not None for p in found):
            return [p for p in found if p is not None]
    partial = [
        f"{d} has {', '.join(n for n in names if _pick(d, n, gz))} but not "
        f"{', '.join(n for n in names if not _pick(d, n, gz))}"
        for d in dirs
        if d.is_dir() and any(_pick(d, n, gz) for n in names)
    ]
    suffix = " (each raw or .gz)" if gz else ""
    searched = ", ".join(f"{d}{'' if d.is_dir() else ' (missing)'}" for d in dirs)
    raise DataError(
        f"data set {dataset!r}: expected files {', '.join(names)}{suffix} in one directory; "
        f"searched {searched}"
        + (f"; {'; '.join(partial)}" if partial else "")
        + f". Nothing is downloaded: put the files there or pass data_dir / set ${DATA_DIR_ENV}."
    )


def _pick(directory: Path, name: str, gz: bool) -> Path | None:
    for candidate in (name, name + ".gz") if gz else (name,):
        path = directory / candidate
        if path.is_file():
            return path
    return None


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when it starts with the gzip magic."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e}") from e
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise DataError(f"{path}: corrupt or truncated gzip data: {e}") from e
    return raw


# --- IDX (MNIST, Fashion-MNIST, EMNIST) --------------------------------------------------

# http://yann.lecun.com/exdb/mnist/: magic = 0x00 0x00 <type code> <ndim>, then
# ndim big-endian uint32 sizes, then the data, big-endian.
_IDX_TYPES: dict[int, np.dtype[Any]] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path: Path) -> NDArray[Any]:
    """Read an IDX file (raw or gzipped) into a native-endian array.

    Raises:
        DataError: naming ``path``, for a bad magic number or a data size that
            disagrees with the header (truncated or trailing bytes).
    """
    raw = _read_bytes(path)
    if len(raw) < 4:
        raise DataError(f"{path}: {len(raw)} bytes, too short for an IDX header")
    if raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES or raw[3] == 0:
        raise DataError(
            f"{path}: bad IDX magic number 0x{raw[:4].hex()} "
            "(expected 00 00, a type code 08/09/0b/0c/0d/0e, and a dimension count)"
        )
    dtype, ndim = _IDX_TYPES[raw[2]], raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: truncated IDX header ({len(raw)} of {header} bytes)")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    expected = math.prod(dims) * dtype.itemsize
    if len(raw) - header != expected:
        problem = "truncated" if len(raw) - header < expected else "trailing bytes"
        raise DataError(
            f"{path}: {problem}: header says shape {dims} ({expected} data bytes) "
            f"but the file holds {len(raw) - header}"
        )
    data = np.frombuffer(raw, dtype=dtype, count=math.prod(dims), offset=header)
    return data.reshape(dims).astype(dtype.newbyteorder("="))


def idx_file_names(name: str) -> list[str]:
    """Standard file names (without ``.gz``) of an IDX data set: train images,
    train labels, test images, test labels."""
    if name.startswith("emnist-"):
        stem = name + "-{}-{}-idx{}-ubyte"
        return [
            stem.format(split, kind, d)
            for split in ("train", "test")
            for kind, d in (("images", 3), ("labels", 1))
        ]
    return [
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ]


def _idx_dirs(name: str, root: Path) -> list[Path]:
    # Own sub-folder first, then torchvision's layout, then root itself (root
    # alone cannot tell MNIST from Fashion-MNIST: their file names are equal).
    if name.startswith("emnist-"):
        return [root / "emnist", root / "gzip", root / "EMNIST" / "raw", root]
    vision = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST"}[name]
    return [root / name, root / vision / "raw", root]


def _load_idx_dataset(
    name: str, root: Path
) -> tuple[NDArray[Any], LabelArray, NDArray[Any], LabelArray]:
    paths = _find_files(name, _idx_dirs(name, root), idx_file_names(name), gz=True)
    out: list[NDArray[Any]] = []
    for images_path, labels_path in ((paths[0], paths[1]), (paths[2], paths[3])):
        images, labels = read_idx(images_path), read_idx(labels_path)
        if images.ndim != 3:
            raise DataError(
                f"{images_path}: expected 3-D images (N, rows, cols), got {images.shape}"
            )
        if labels.ndim != 1:
            raise DataError(f"{labels_path}: expected 1-D labels, got shape {labels.shape}")
        if images.shape[0] != labels.shape[0]:
            raise DataError(
                f"{labels_path}: {labels.shape[0]} labels for {images.shape[0]} images "
                f"in {images_path.name}"
            )
        labels = labels.astype(np.int64)
        if name.startswith("emnist-"):
            # EMNIST stores each image transposed relative to MNIST.
            images = images.transpose(0, 2, 1)
        if name == "emnist-letters":
            labels = labels - 1  # letters are labelled 1..26
        _check_label_range(labels, 26 if name == "emnist-letters" else 10, labels_path)
        out += [images[:, None], labels]
    return out[0], out[1], out[2], out[3]


def _check_label_range(labels: LabelArray, num_classes: int, path: Path) -> None:
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise DataError(
            f"{path}: labels span {labels.min()}..{labels.max()} after mapping, "
            f"expected 0..{num_classes - 1}"
        )


# --- CIFAR-10 ----------------------------------------------------------------------------

CIFAR10_FILES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


class _BatchUnpickler(pickle.Unpickler):
    """Unpickles the CIFAR batches' dicts of arrays and lists, and nothing that
    could run code (a pickle may otherwise call any importable function)."""

    _ALLOWED: ClassVar[set[tuple[str, str]]] = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a data batch")
        return super().find_class(module, name)


def _read_cifar_batch(path: Path) -> tuple[NDArray[np.uint8], LabelArray]:
    try:
        with path.open("rb") as f:
            batch = _BatchUnpickler(f, encoding="bytes").load()
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e}") from e
    except Exception as e:  # any unpickling failure means a malformed file
        raise DataError(f"{path}: not a CIFAR-10 python batch (unpickling failed: {e})") from e
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        keys = sorted(batch) if isinstance(batch, dict) else type(batch).__name__
        raise DataError(f"{path}: expected a dict with keys b'data' and b'labels', got {keys}")
    data = np.asarray(batch[b"data"])
    labels = np.asarray(batch[b"labels"])
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or data.dtype != np.uint8:
        raise DataError(f"{path}: b'data' must be uint8 (N, 3072), got {data.dtype} {data.shape}")
    if labels.ndim != 1 or labels.shape[0] != data.shape[0]:
        raise DataError(f"{path}: {labels.shape} labels for {data.shape[0]} images")
    if not np.issubdtype(labels.dtype, np.integer):
        raise DataError(f"{path}: labels must be integers, got {labels.dtype}")
    labels = labels.astype(np.int64)
    _check_label_range(labels, 10, path)
    # Each row is the red, green, then blue 32x32 plane, row-major.
    return data.reshape(-1, 3, 32, 32), labels


def _load_cifar10(root: Path) -> tuple[NDArray[Any], LabelArray, NDArray[Any], LabelArray]:
    paths = _find_files("cifar10", [root / "cifar-10-batches-py", root], CIFAR10_FILES, gz=False)
    batches = [_read_cifar_batch(p) for p in paths]
    train = batches[:5]
    test_x, test_y = batches[5]
    return (
        np.concatenate([b[0] for b in train]),
        np.concatenate([b[1] for b in train]),
        test_x,
        test_y,
    )


# --- generic npz -------------------------------------------------------------------------


def _resolve_npz(spec: str, data_dir: Path | None) -> Path:
    path = Path(spec).expanduser()
    if not path.is_absolute() and not path.exists() and data_dir is not None:
        path = Path(data_dir) / path
    if not path.is_file():
        raise DataError(
            f"npz data set: file {spec} not found (looked at {Path(spec).expanduser()}"
            + (f" and {Path(data_dir) / spec}" if data_dir is not None else "")
            + "); expected an .npz with arrays x_train, y_train, x_test, y_test"
        )
    return path


def _load_npz(
    path: Path, test_fraction: float, seed: int
) -> tuple[NDArray[Any], LabelArray, NDArray[Any], LabelArray, int]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {k: archive[k] for k in archive.files}
    except Exception as e:  # zip, header or pickle-refusal errors: all malformed files
        raise DataError(f"{path}: not a readable .npz archive: {e}") from e
    missing = [k for k in ("x_train", "y_train") if k not in arrays]
    has_test = [k in arrays for k in ("x_test", "y_test")]
    if missing or any(has_test) and not all(has_test):
        absent = missing + [k for k in ("x_test", "y_test") if k not in arrays and any(has_test)]
        raise DataError(
            f"{path}: missing array(s) {', '.join(absent)}; has {', '.join(sorted(arrays))}"
        )
    train_x = _npz_images(arrays["x_train"], path, "x_train")
    train_y = _npz_labels(arrays["y_train"], len(train_x), path, "y_train")
    if all(has_test):
        test_x = _npz_images(arrays["x_test"], path, "x_test")
        test_y = _npz_labels(arrays["y_test"], len(test_x), path, "y_test")
        if test_x.shape[1:] != train_x.shape[1:]:
            raise DataError(
                f"{path}: x_test images {test_x.shape[1:]} != x_train {train_x.shape[1:]}"
            )
    else:
        train_x, train_y, test_x, test_y = _stratified_split(train_x, train_y, test_fraction, seed)
    num_classes = int(max(train_y.max(), test_y.max(initial=0))) + 1
    return train_x, train_y, test_x, test_y, num_classes


def _npz_images(x: NDArray[Any], path: Path, key: str) -> NDArray[Any]:
    """NHW -> N1HW; NCHW kept; NHWC -> NCHW. The channel axis of a 4-D array is
    the one of size <= 4 among axes 1 and 3 (axis 1 when both are)."""
    if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)):
        raise DataError(f"{path}: {key} must be numeric, got {x.dtype}")
    if x.ndim == 3:
        return x[:, None]
    if x.ndim == 4:
        if x.shape[1] <= 4:
            return x
        if x.shape[3] <= 4:
            return x.transpose(0, 3, 1, 2)
        raise DataError(
            f"{path}: {key} has shape {x.shape}: no channel axis of size <= 4 "
            "at position 1 (NCHW) or 3 (NHWC)"
        )
    raise DataError(f"{path}: {key} must be NHW, NCHW or NHWC images, got shape {x.shape}")


def _npz_labels(y: NDArray[Any], count: int, path: Path, key: str) -> LabelArray:
    if y.ndim != 1 or y.shape[0] != count:
        raise DataError(f"{path}: {key} must be 1-D with {count} labels, got shape {y.shape}")
    if np.issubdtype(y.dtype, np.floating) and np.all(np.mod(y, 1) == 0):
        y = y.astype(np.int64)
    if not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"{path}: {key} must hold integer class ids, got {y.dtype}")
    if y.size and y.min() < 0:
        raise DataError(f"{path}: {key} has negative class id {y.min()}")
    return y.astype(np.int64)
