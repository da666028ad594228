import numpy as np
import pytest

from mjfl.coordinator.engine.budget import LossCurve, fit_loss_curve, round_budget


def test_loss_curve_hand_computed():
    curve = LossCurve(g0=0.5, g1=1.0, g2=0.1)
    assert curve.loss(2) == pytest.approx(1 / 2 + 0.1)
    # 1/(0.5 r + 1) + 0.1 = 0.2  <=>  0.5 r + 1 = 10  <=>  r = 18
    assert curve.rounds_to(0.2) == pytest.approx(18)
    assert curve.rounds_to(0.1) is None  # the asymptote is never reached


def test_budget_is_1_3_times_the_fitted_rounds():
    truth = LossCurve(0.5, 1.0, 0.1)
    rng = np.random.default_rng(0)
    histories = [[truth.loss(r) * (1 + rng.normal(0, 0.01)) for r in range(1, 30)] for _ in range(3)]
    curve = fit_loss_curve(histories)
    assert curve is not None and curve.rounds_to(0.2) == pytest.approx(18, rel=0.1)
    budget, _ = round_budget(histories, 0.2, cap=100)
    assert budget == pytest.approx(1.3 * 18, abs=3)
    assert round_budget(histories, 0.2, cap=10)[0] == 10  # never above the cap
    assert round_budget([], 0.2, cap=40) == (40, None)  # no history: the cap
    assert round_budget(histories, None, cap=40) == (40, None)
