import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mjfl.errors import ConfigError, DataError
from mjfl.jobs.datasets import (
    CIFAR10_FILES,
    Dataset,
    idx_file_names,
    load_dataset,
    read_idx,
    resize_bilinear,
)

IDX_CODES = {
    np.uint8: 0x08,
    np.int8: 0x09,
    np.int16: 0x0B,
    np.int32: 0x0C,
    np.float32: 0x0D,
    np.float64: 0x0E,
}


# --- writers of the real formats -------------------------------------------------------


def idx_bytes(array: np.ndarray) -> bytes:
    """An IDX file as LeCun's page specifies: 00 00 type ndim, big-endian sizes and data."""
    code = IDX_CODES[array.dtype.type]
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write_idx(path: Path, array: np.ndarray, *, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = idx_bytes(array)
    if gz:
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def random_images(rng: np.random.Generator, n: int, size: int = 28) -> np.ndarray:
    return rng.integers(0, 256, size=(n, size, size), dtype=np.uint8)


def write_idx_set(
    directory: Path, name: str, train: tuple, test: tuple, *, gz: bool = False
) -> None:
    names = idx_file_names(name)
    for fname, array in zip(names, (*train, *test), strict=True):
        write_idx(directory / fname, array, gz=gz)


def expected_normalised(train_raw: np.ndarray, raw: np.ndarray) -> np.ndarray:
    """(raw - mean_c) / std_c with the training set's per-channel statistics."""
    train = train_raw.astype(np.float64)
    mean = train.mean(axis=(0, 2, 3), keepdims=True)
    std = train.std(axis=(0, 2, 3), keepdims=True)
    return (raw.astype(np.float64) - mean) / std


def cifar_batch(rng: np.random.Generator, n: int, label: str) -> dict:
    # The keys, types and row layout of the files in cifar-10-python.tar.gz.
    return {
        b"batch_label": label.encode(),
        b"labels": [int(v) for v in rng.integers(0, 10, size=n)],
        b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
        b"filenames": [f"img_{i}.png".encode() for i in range(n)],
    }


def write_cifar(directory: Path, rng: np.random.Generator, n: int = 4) -> list[dict]:
    directory.mkdir(parents=True, exist_ok=True)
    batches = []
    for fname in CIFAR10_FILES:
        batch = cifar_batch(rng, n, fname)
        # protocol 2 as the real (Python 2 cPickle) files, which name the
        # reconstructor numpy.core.multiarray: written that way here too
        raw = pickle.dumps(batch, protocol=2)
        raw = raw.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
        (directory / fname).write_bytes(raw)
        batches.append(batch)
    return batches


# --- digits ----------------------------------------------------------------------------


def test_digits_default_shapes_split_and_normalisation() -> None:
    d = load_dataset("digits")
    assert isinstance(d, Dataset)
    assert d.input_shape == (1, 8, 8) and d.num_classes == 10 and d.name == "digits"
    assert d.train_x.dtype == np.float32 and d.train_y.dtype == np.int64
    assert d.train_x.shape[1:] == (1, 8, 8) and d.test_x.shape[1:] == (1, 8, 8)
    assert len(d.train_x) + len(d.test_x) == 1797
    assert len(d.train_x) == len(d.train_y) and len(d.test_x) == len(d.test_y)
    assert abs(d.train_x.mean()) < 1e-4 and abs(d.train_x.std() - 1) < 1e-3
    # stratified: every class holds out ~20 %
    train_counts = np.bincount(d.train_y, minlength=10)
    test_counts = np.bincount(d.test_y, minlength=10)
    share = test_counts / (train_counts + test_counts)
    assert np.all(np.abs(share - 0.2) < 0.01)
    assert not d.train_x.flags.writeable


def test_digits_resized_and_replicated_for_a_cifar_shaped_model() -> None:
    d = load_dataset("digits", image_size=32, channels=3)
    assert d.input_shape == (3, 32, 32)
    assert d.train_x.shape[1:] == (3, 32, 32) and d.test_x.shape[1:] == (3, 32, 32)
    assert np.array_equal(d.train_x[:, 0], d.train_x[:, 2])
    stats = d.train_x.mean(axis=(0, 2, 3)), d.train_x.std(axis=(0, 2, 3))
    assert np.allclose(stats[0], 0, atol=1e-4) and np.allclose(stats[1], 1, atol=1e-3)
    small = load_dataset("digits")
    assert np.array_equal(small.train_y, d.train_y)


def test_digits_split_depends_on_seed_only() -> None:
    a, b = load_dataset("digits", seed=1), load_dataset("digits", seed=1)
    c = load_dataset("digits", seed=2)
    assert np.array_equal(a.train_x, b.train_x) and np.array_equal(a.test_y, b.test_y)
    assert not np.array_equal(a.train_y, c.train_y)
    assert len(load_dataset("digits", test_fraction=0.5).test_y) == pytest.approx(1797 / 2, abs=10)


def test_digits_match_scikit_learn() -> None:
    from sklearn.datasets import load_digits

    from mjfl.jobs.datasets import _digits

    x, y = _digits()
    bunch = load_digits()
    assert np.array_equal(x[:, 0], bunch.images) and np.array_equal(y, bunch.target)


@pytest.mark.parametrize("size", [4, 8, 13, 32])
def test_resize_matches_torch_bilinear_antialiased(size: int) -> None:
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(size).random((3, 2, 11, 11)).astype(np.float32)
    ours = resize_bilinear(x, size, size)
    theirs = torch.nn.functional.interpolate(
        torch.from_numpy(x),
        size=(size, size),
        mode="bilinear",
        align_corners=False,
        antialias=True,
    ).numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


# --- IDX data sets ---------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(list(IDX_CODES)),
    st.lists(st.integers(1, 5), min_size=1, max_size=4),
    st.booleans(),
)
def test_read_idx_round_trips(tmp_path_factory, dtype: type, shape: list[int], gz: bool) -> None:
    rng = np.random.default_rng(len(shape))
    array = (rng.random(shape) * 100).astype(dtype)
    path = write_idx(tmp_path_factory.mktemp("idx") / "a-idx-ubyte", array, gz=gz)
    out = read_idx(path)
    assert out.dtype == np.dtype(dtype) and out.dtype.isnative
    assert np.array_equal(out, array)


def test_mnist_raw_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    train = random_images(rng, 12), rng.integers(0, 10, 12, dtype=np.uint8)
    test = random_images(rng, 5), rng.integers(0, 10, 5, dtype=np.uint8)
    write_idx_set(tmp_path / "mnist", "mnist", train, test)
    d = load_dataset("mnist", tmp_path)
    assert d.input_shape == (1, 28, 28) and d.num_classes == 10
    assert np.array_equal(d.train_y, train[1]) and np.array_equal(d.test_y, test[1])
    np.testing.assert_allclose(
        d.train_x, expected_normalised(train[0][:, None], train[0][:, None]), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        d.test_x, expected_normalised(train[0][:, None], test[0][:, None]), rtol=1e-5, atol=1e-5
    )


def test_fashion_mnist_gzipped_in_torchvision_layout_resized(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    train = random_images(rng, 6), rng.integers(0, 10, 6, dtype=np.uint8)
    test = random_images(rng, 3), rng.integers(0, 10, 3, dtype=np.uint8)
    write_idx_set(tmp_path / "FashionMNIST" / "raw", "fashion-mnist", train, test, gz=True)
    d = load_dataset("fashion-mnist", tmp_path, image_size=32)
    assert d.input_shape == (1, 32, 32) and d.train_x.shape == (6, 1, 32, 32)
    assert np.array_equal(d.test_y, test[1])


def test_emnist_letters_are_transposed_back_and_labels_shifted(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    upright = random_images(rng, 8)  # what the letters really look like
    letters = rng.integers(1, 27, 8, dtype=np.uint8)  # EMNIST letters: 1..26
    letters[:2] = (1, 26)
    stored = upright.transpose(0, 2, 1).copy()  # EMNIST's on-disk orientation
    write_idx_set(
        tmp_path / "gzip", "emnist-letters", (stored, letters), (stored[:3], letters[:3]), gz=True
    )
    d = load_dataset("emnist-letters", tmp_path)
    assert d.num_classes == 26
    assert np.array_equal(d.train_y, letters.astype(np.int64) - 1)
    assert d.train_y.min() == 0 and d.train_y.max() == 25
    want = expected_normalised(upright[:, None], upright[:, None])
    np.testing.assert_allclose(d.train_x, want, rtol=1e-5, atol=1e-5)


def test_emnist_digits_raw_keep_their_labels(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    upright = random_images(rng, 5)
    labels = np.arange(5, dtype=np.uint8)
    write_idx_set(
        tmp_path,
        "emnist-digits",
        (upright.transpose(0, 2, 1).copy(), labels),
        (upright.transpose(0, 2, 1).copy(), labels),
    )
    d = load_dataset("emnist-digits", tmp_path)
    assert d.num_classes == 10 and np.array_equal(d.test_y, labels)
    assert np.argmax(d.train_x[0, 0]) == np.argmax(upright[0])


def test_missing_files_name_the_expected_files_and_directory(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        load_dataset("mnist", tmp_path)
    message = str(err.value)
    for fname in idx_file_names("mnist"):
        assert fname in message
    assert str(tmp_path) in message


def test_one_missing_file_is_named(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    write_idx_set(
        tmp_path,
        "mnist",
        (random_images(rng, 2), np.zeros(2, np.uint8)),
        (random_images(rng, 2), np.zeros(2, np.uint8)),
    )
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError, match="but not t10k-labels-idx1-ubyte"):
        load_dataset("mnist", tmp_path)


def corrupt(kind: str, data: bytes) -> bytes:
    if kind == "magic":
        return b"\x00\x00\x07\x03" + data[4:]
    if kind == "truncated":
        return data[:-5]
    if kind == "trailing":
        return data + b"\x00"
    if kind == "header":
        return data[:9]
    raise AssertionError(kind)


@pytest.mark.parametrize(
    ("kind", "match"),
    [
        ("magic", "magic"),
        ("truncated", "truncated"),
        ("trailing", "trailing"),
        ("header", "truncated IDX header"),
    ],
)
@pytest.mark.parametrize("gz", [False, True])
def test_malformed_idx_files_are_named(tmp_path: Path, kind: str, match: str, gz: bool) -> None:
    rng = np.random.default_rng(5)
    write_idx_set(
        tmp_path,
        "mnist",
        (random_images(rng, 3), np.zeros(3, np.uint8)),
        (random_images(rng, 2), np.zeros(2, np.uint8)),
        gz=gz,
    )
    victim = next(tmp_path.glob("train-images-idx3-ubyte*"))
    data = corrupt(kind, gzip.decompress(victim.read_bytes()) if gz else victim.read_bytes())
    victim.write_bytes(gzip.compress(data) if gz else data)
    with pytest.raises(DataError, match=match) as err:
        load_dataset("mnist", tmp_path)
    assert victim.name in str(err.value)


def test_truncated_gzip_and_mismatched_counts_are_named(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    write_idx_set(
        tmp_path,
        "mnist",
        (random_images(rng, 3), np.zeros(4, np.uint8)),
        (random_images(rng, 2), np.zeros(2, np.uint8)),
    )
    with pytest.raises(DataError, match="4 labels for 3 images") as err:
        load_dataset("mnist", tmp_path)
    assert "train-labels-idx1-ubyte" in str(err.value)

    bad = tmp_path / "bad-idx3-ubyte.gz"
    bad.write_bytes(gzip.compress(idx_bytes(random_images(rng, 2)))[:-10])
    with pytest.raises(DataError, match="bad-idx3-ubyte.gz"):
        read_idx(bad)


def test_out_of_range_labels_are_rejected(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    write_idx_set(
        tmp_path,
        "emnist-letters",
        (random_images(rng, 2), np.array([0, 3], np.uint8)),
        (random_images(rng, 2), np.array([1, 2], np.uint8)),
    )
    with pytest.raises(DataError, match="emnist-letters-train-labels-idx1-ubyte"):
        load_dataset("emnist-letters", tmp_path)  # label 0 is not a letter


# --- CIFAR-10 --------------------------------------------------------------------------


def test_cifar10_python_batches(tmp_path: Path) -> None:
    batches = write_cifar(tmp_path / "cifar-10-batches-py", np.random.default_rng(8))
    d = load_dataset("cifar10", tmp_path)
    assert d.input_shape == (3, 32, 32) and d.num_classes == 10
    assert len(d.train_y) == 20 and len(d.test_y) == 4
    train_labels = np.concatenate([b[b"labels"] for b in batches[:5]])
    assert np.array_equal(d.train_y, train_labels)
    assert np.array_equal(d.test_y, batches[5][b"labels"])
    # each row is the R, G, B planes of a 32x32 image
    train_raw = np.concatenate([b[b"data"] for b in batches[:5]]).reshape(-1, 3, 32, 32)
    test_raw = batches[5][b"data"].reshape(-1, 3, 32, 32)
    np.testing.assert_allclose(
        d.test_x, expected_normalised(train_raw, test_raw), rtol=1e-5, atol=1e-5
    )


def test_cifar10_files_directly_in_data_dir_to_grayscale(tmp_path: Path) -> None:
    write_cifar(tmp_path, np.random.default_rng(9))
    d = load_dataset("cifar10", tmp_path, channels=1, image_size=28)
    assert d.input_shape == (1, 28, 28)
    with pytest.raises(ConfigError, match="channels"):
        load_dataset("cifar10", tmp_path, channels=2)


def test_cifar10_missing_batch(tmp_path: Path) -> None:
    write_cifar(tmp_path, np.random.default_rng(10))
    (tmp_path / "data_batch_3").unlink()
    with pytest.raises(DataError, match="data_batch_3") as err:
        load_dataset("cifar10", tmp_path)
    assert "cifar-10-batches-py" in str(err.value)


class Boom:
    def __reduce__(self):
        import os

        return (os.system, ("echo pwned > pwned.txt",))


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (b"this is not a pickle", "unpickling failed"),
        (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8)}, protocol=2), "b'labels'"),
        (pickle.dumps({b"data": np.zeros((2, 3071), np.uint8), b"labels": [0, 1]}), "3072"),
        (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}), "labels for 2"),
        (pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": [10]}), "0..9"),
        (pickle.dumps(Boom()), "not allowed"),
    ],
)
def test_malformed_cifar_batches_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, payload: bytes, match: str
) -> None:
    monkeypatch.chdir(tmp_path)
    write_cifar(tmp_path, np.random.default_rng(11))
    (tmp_path / "data_batch_2").write_bytes(payload)
    with pytest.raises(DataError, match=match) as err:
        load_dataset("cifar10", tmp_path)
    assert "data_batch_2" in str(err.value)
    assert not (tmp_path / "pwned.txt").exists()


# --- npz -------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["NHWC", "NCHW", "NHW"])
def test_npz_layouts(tmp_path: Path, layout: str) -> None:
    rng = np.random.default_rng(12)
    channels = 1 if layout == "NHW" else 3
    nchw = rng.integers(0, 256, size=(6, channels, 10, 10)).astype(np.uint8)
    stored = {"NHWC": nchw.transpose(0, 2, 3, 1), "NCHW": nchw, "NHW": nchw[:, 0]}[layout]
    path = tmp_path / "set.npz"
    np.savez(path, x_train=stored, y_train=np.arange(6) % 3, x_test=stored[:2], y_test=[0, 2])
    d = load_dataset(f"npz:{path}")
    assert d.input_shape == (channels, 10, 10) and d.num_classes == 3
    np.testing.assert_allclose(d.train_x, expected_normalised(nchw, nchw), rtol=1e-5, atol=1e-5)
    assert np.array_equal(d.test_y, [0, 2])


def test_npz_by_file_name_relative_to_data_dir_and_without_test_split(tmp_path: Path) -> None:
    x = np.random.default_rng(13).random((40, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "mine.npz", x_train=x, y_train=np.arange(40) % 4)
    d = load_dataset("mine.npz", tmp_path, test_fraction=0.25, seed=3)
    assert len(d.test_y) == 12 and np.array_equal(np.bincount(d.test_y), [3, 3, 3, 3])


@pytest.mark.parametrize(
    ("arrays", "match"),
    [
        (
            {
                "x_train": np.zeros((2, 4, 4)),
                "y_train": np.zeros(2, int),
                "x_test": np.zeros((1, 4, 4)),
            },
            "y_test",
        ),
        ({"x_train": np.zeros((2, 4, 4)), "y_train": np.zeros(3, int)}, "y_train"),
        ({"x_train": np.zeros((2, 8, 8, 8)), "y_train": np.zeros(2, int)}, "channel"),
        ({"x_train": np.zeros((2, 16)), "y_train": np.zeros(2, int)}, "NHW"),
        ({"x_train": np.zeros((2, 4, 4)), "y_train": np.array([0.5, 1.0])}, "integer"),
    ],
)
def test_malformed_npz_is_named(tmp_path: Path, arrays: dict, match: str) -> None:
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(DataError, match=match) as err:
        load_dataset(f"npz:{path}")
    assert "bad.npz" in str(err.value)


def test_npz_missing_or_not_a_zip(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="nowhere.npz"):
        load_dataset("npz:nowhere.npz", tmp_path)
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(DataError, match="junk.npz"):
        load_dataset("junk.npz", tmp_path)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": "imagenet"}, "dataset"),
        ({"name": "digits", "image_size": 0}, "image_size"),
        ({"name": "digits", "channels": 0}, "channels"),
        ({"name": "digits", "test_fraction": 1.0}, "test_fraction"),
    ],
)
def test_bad_arguments_raise_config_errors(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_dataset(**kwargs)
    assert err.value.field == field
