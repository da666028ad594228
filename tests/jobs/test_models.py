"""The model zoo and its export form, in plain PyTorch (no ExecuTorch).

The export form (`mjfl.jobs.convert.ExportForm`) must compute the same
function and the same gradients as the eager model from the same
parameters; these tests check that in eager PyTorch, which is fast, so a
wrong conversion is caught before any export. tests/jobs/test_trainers.py
and tests/jobs/test_convert.py check the runtime.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mjfl.errors import ConfigError, ProgramError
from mjfl.jobs.convert import EagerForm, ExportForm
from mjfl.jobs.layers import max_pool_maps
from mjfl.jobs.models import (
    MODELS,
    ModelSpec,
    batch_norm_pixels,
    build_model,
    dropout_shapes,
    initial_weights,
    load_weights,
    parameter_count,
    state_to_numpy,
)

ALL = sorted(MODELS)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("shape", [(1, 16, 16), (1, 28, 28), (3, 12, 12)])
def test_models_build_for_input_shapes(name: str, shape: tuple[int, int, int]) -> None:
    if name == "lenet5" and shape[1] < 12:
        pytest.skip("lenet5 needs 12x12")
    model = build_model(name, shape, 7)
    out = model(torch.randn(5, *shape))
    assert out.shape == (5, 7)
    # Only plain layers: the exchanged weights are an ordinary state_dict.
    kinds = {type(m).__name__ for m in model.modules() if not list(m.children())}
    assert kinds <= {"Conv2d", "Linear", "BatchNorm2d", "Dropout"}


@pytest.mark.parametrize("name", ALL)
def test_export_form_matches_eager_values_and_gradients(name: str) -> None:
    torch.manual_seed(0)
    shape = (1, 16, 16) if name != "alexnet" else (2, 18, 14)  # odd pooling edges too
    model = build_model(name, shape, 10, dropout=0.0)
    model.train()
    x = torch.randn(6, *shape)
    y = torch.randint(0, 10, (6,))

    eager = model(x)
    F.cross_entropy(eager, y).backward()
    expected = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad()

    logits, _ = ExportForm(model).run(x, [])
    torch.testing.assert_close(logits, eager, rtol=1e-5, atol=1e-5)
    F.cross_entropy(logits, y).backward()
    for k, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[k], rtol=1e-4, atol=1e-6, msg=k)


@pytest.mark.parametrize("name", ["cnn-b", "vgg6", "alexnet"])
def test_dropout_from_noise_is_the_same_in_both_forms(name: str) -> None:
    """Eager and export forms drop the same activations given the same noise."""
    torch.manual_seed(0)
    shape = (1, 16, 16)
    model = build_model(name, shape, 10)  # the paper's dropout rates
    sites = dropout_shapes(model, shape)
    assert len(sites) == {"cnn-b": 2, "vgg6": 1, "alexnet": 2}[name]
    x = torch.randn(6, *shape)
    y = torch.randint(0, 10, (6,))
    noise = [torch.rand(6, *site) for site in sites]

    feed = iter(noise)
    eager = EagerForm(model)(x, lambda s: next(feed))
    F.cross_entropy(eager, y).backward()
    expected = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad()

    logits, _ = ExportForm(model).run(x, [u.movedim(0, -1) for u in noise])  # the program's (*features, N) layout
    torch.testing.assert_close(logits, eager, rtol=1e-5, atol=1e-5)
    F.cross_entropy(logits, y).backward()
    for k, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[k], rtol=1e-4, atol=1e-6, msg=k)
    # Dropout really dropped something: without it the logits differ.
    with torch.no_grad():
        assert not torch.allclose(model.eval()(x), eager, atol=1e-3)


def test_export_form_reports_batch_norm_statistics() -> None:
    torch.manual_seed(0)
    model = build_model("cnn-a-iid", (1, 8, 8), 10)
    x = torch.randn(4, 1, 8, 8)
    _, stats = ExportForm(model).run(x, [])
    # Batch statistics of bn1 are those of conv1's output.
    h = model.conv1(x)
    torch.testing.assert_close(stats[0], h.mean(dim=(0, 2, 3)), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(stats[1], h.var(dim=(0, 2, 3), unbiased=False), rtol=1e-4, atol=1e-6)
    assert len(stats) == 4
    assert batch_norm_pixels(model, (1, 8, 8)) == {"bn1": 64, "bn2": 16}


@settings(max_examples=60, deadline=None)
@given(
    h=st.integers(3, 9),
    w=st.integers(3, 9),
    k=st.integers(1, 3),
    stride=st.integers(1, 3),
    padding=st.integers(0, 1),
    ties=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_max_pool_maps_equals_max_pool2d(h: int, w: int, k: int, stride: int, padding: int, ties: bool, seed: int) -> None:
    """Values and gradients, ties included, for any window, stride and padding the conversion accepts."""
    if 2 * padding > k:
        padding = 0  # PyTorch's own bound: pad at most half the window
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, h, w, generator=g)
    if ties:  # small integers: many equal maxima, as after ReLU
        x = torch.randint(0, 3, (2, 3, h, w), generator=g).float()
    x.requires_grad_(True)
    maps = x.permute(1, 2, 3, 0)  # (C, H, W, N)
    got = max_pool_maps(maps, (k, k), (stride, stride), (padding, padding)).permute(3, 0, 1, 2)
    want = F.max_pool2d(x, k, stride, padding)
    torch.testing.assert_close(got, want)
    upstream = torch.randn(want.shape, generator=g)
    (g_got,) = torch.autograd.grad(got, x, upstream)
    (g_want,) = torch.autograd.grad(want, x, upstream)
    # PyTorch routes a tied maximum's gradient to the first element in
    # row-major order; the tournament does the same.
    torch.testing.assert_close(g_got, g_want)


def test_eager_form_dropout_follows_the_modules_mode() -> None:
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Dropout(0.5), torch.nn.Linear(1000, 2))
    x = torch.ones(1, 1000)
    form = EagerForm(model)
    model.eval()
    assert torch.equal(form(x), model(x))
    model.train()
    assert not torch.equal(form(x), model.eval()(x))


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"name": "nope", "input_shape": (1, 16, 16), "num_classes": 10}, "model"),
        ({"name": "lenet5", "input_shape": (1, 16), "num_classes": 10}, "input_shape"),
        ({"name": "lenet5", "input_shape": (1, 16, 16), "num_classes": 1}, "num_classes"),
        ({"name": "lenet5", "input_shape": (1, 16, 16), "num_classes": 10, "dropout": 1.0}, "dropout"),
    ],
)
def test_model_spec_validates_fields(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        ModelSpec(**kwargs)
    assert info.value.field == field


@pytest.mark.parametrize("name, shape", [("lenet5", (1, 8, 8)), ("vgg6", (1, 7, 7))])
def test_too_small_inputs_are_a_config_error(name: str, shape: tuple[int, int, int]) -> None:
    with pytest.raises(ConfigError, match="input_shape"):
        build_model(name, shape, 10)


def test_initial_weights_are_seeded_state_dicts() -> None:
    spec = ModelSpec("cnn-a-iid", (1, 16, 16), 10)
    a = initial_weights(spec, 1)
    b = initial_weights(spec, 1)
    c = initial_weights(spec, 2)
    assert list(a) == list(build_model(spec).state_dict())
    assert all(v.dtype == np.float32 for v in a.values())
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["conv1.weight"], c["conv1.weight"])
    state = torch.get_rng_state()
    initial_weights(spec, 3)
    assert torch.equal(state, torch.get_rng_state())  # global RNG untouched


def test_load_weights_round_trip_and_mismatch() -> None:
    spec = ModelSpec("cnn-a-iid", (1, 8, 8), 10)
    model = build_model(spec)
    w = initial_weights(spec, 5)
    w["bn1.num_batches_tracked"] = np.array(7.0, dtype=np.float32)
    load_weights(model, w)
    assert model.bn1.num_batches_tracked.item() == 7
    back = state_to_numpy(model)
    assert all(np.array_equal(back[k], w[k]) for k in w)
    with pytest.raises(ProgramError, match="missing"):
        load_weights(model, {k: v for k, v in w.items() if k != "fc3.bias"})
    bad = dict(w)
    bad["fc3.bias"] = np.zeros(3, np.float32)
    with pytest.raises(ProgramError, match="shape"):
        load_weights(model, bad)


def test_parameter_counts_documented_for_16x16() -> None:
    # docs/models.md lists these; a changed architecture must update the docs.
    counts = {n: parameter_count(ModelSpec(n, (1, 16, 16), 10)) for n in ALL}
    assert counts == {
        "alexnet": 266_474,
        "cnn-a-iid": 2_864_058,
        "cnn-a-noniid": 121_994,
        "cnn-b": 71_274,
        "lenet5": 21_386,
        "resnet13": 174_970,
        "vgg6": 420_330,
    }
