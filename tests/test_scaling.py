"""The one threshold of the power-of-two rescaling against numpy's float facts and a frexp loop
written here."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnreg.core.scaling import is_ordinary, ordinary_limit, power_of_two_scale, unscaled


@pytest.mark.parametrize(
    "dtype, np_dtype", [(torch.float64, np.float64), (torch.float32, np.float32)]
)
def test_the_limit_is_a_quarter_of_the_maximum_exponent(dtype, np_dtype):
    maxexp = np.finfo(np_dtype).maxexp  # 1024 / 128: the largest finite value is below 2^maxexp
    assert ordinary_limit(dtype) == maxexp // 4
    for power in (1, 2, 3, 5):
        assert ordinary_limit(dtype, power) == maxexp // (4 * power)


def _scale_loop(biggest: float, limit: int) -> float:
    """``2^e`` with ``biggest = m·2^e``, ``m ∈ [0.5, 1)``, when ``e`` is outside ``±limit``."""
    if biggest == 0:
        return 1.0
    _, e = math.frexp(biggest)
    return math.ldexp(1.0, e) if abs(e) > limit else 1.0


def test_power_of_two_scale_and_is_ordinary_agree_on_the_boundaries():
    limit = ordinary_limit(torch.float64)
    edges = [-limit - 2, -limit - 1, -limit, limit - 1, limit, limit + 1]
    values = [math.ldexp(m, e) for e in edges for m in (0.5, 0.75, 1.0 - 2.0**-53)]
    for v in [0.0, 1.0, *values]:
        x = torch.tensor([[[v, -v / 2]]], dtype=torch.float64)
        want = _scale_loop(v, limit)
        assert float(power_of_two_scale(x)) == want, v
        ordinary = is_ordinary(torch.tensor([v], dtype=torch.float64), limit)
        assert ordinary == (want == 1.0 and v != 0), v
    # a batch mixing both: only the extreme task is scaled
    x = torch.tensor([[[1.0]], [[2.0**300]]], dtype=torch.float64)
    assert power_of_two_scale(x).flatten().tolist() == [1.0, 2.0**301]


@pytest.mark.parametrize(
    "dtype, np_dtype", [(torch.float64, np.float64), (torch.float32, np.float32)]
)
@pytest.mark.parametrize("shape", [(1, 1), (64, 16), (300, 7)])
def test_power_of_two_scale_of_many_entries_at_the_boundaries(dtype, np_dtype, shape):
    """Tasks whose largest magnitude sits just inside or outside the ordinary range, as one
    entry among many small ones, among zeros, or with every entry equal (so the per-task
    2-norm of the one-pass test is far from, or equal to, the maximum), get the scale of the
    exact maximum; ``unscaled`` says whether every scale is 1."""
    limit = np.finfo(np_dtype).maxexp // 4
    top, bottom = 2.0**limit, 2.0 ** (-limit - 1)
    peaks = [top, top * 0.99, top / 2, bottom, bottom * 0.99, bottom * 2, 1.0]
    tasks = []
    for peak in peaks:
        for fill in (peak, peak * 1e-3, 0.0):
            task = np.full(shape, fill)
            task.flat[-1] = -peak
            tasks.append(task)
    tasks.append(np.zeros(shape))
    x = torch.tensor(np.stack(tasks), dtype=dtype)
    want = [_scale_loop(float(np.abs(t).max()), limit) for t in x.double().numpy()]
    assert power_of_two_scale(x).reshape(-1).tolist() == want
    for task, scale in zip(x, want, strict=True):
        assert unscaled(task[None]) == (scale == 1.0)
    assert unscaled(x) == all(s == 1.0 for s in want)
