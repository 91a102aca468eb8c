"""The icl claims' verdicts on both sides of each threshold (paired standard errors over the
evaluation tasks, the OLS null for the cosine) and of the regime gate, and the paired metric
against a numpy loop."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnreg.estimators import GD
from attnreg.studies.icl.claims import PAIRED_SES, icl_claims
from attnreg.studies.icl.config import ICLConfig
from attnreg.studies.icl.metrics import task_losses
from attnreg.studies.paired import in_standard_errors as in_ses
from attnreg.studies.paired import paired_difference as paired


def _row(name, loss_z, cos, eta_z, null=0.8, plateau=None):
    return {
        "kind": "model",
        "model": name,
        "loss_gap": loss_z * 0.01,
        "loss_gap_se": 0.01,
        "cos_sensitivity": cos,
        "cos_null": null,
        "learned_eta": 1.0,
        "eta_gap": eta_z * 0.001,
        "eta_gap_se": 0.001,
        "plateau": plateau,
    }


def test_each_icl_claim_can_pass_fail_and_be_gated_by_the_regime():
    cfg = ICLConfig()
    good = icl_claims(
        [_row("lsa-1", 1.0, 0.999, -0.5), _row("lsa-2-recurrent-gdpp", 1.9, 0, 0)], cfg
    )
    bad = icl_claims([_row("lsa-1", 2.5, 0.7, 3.0), _row("lsa-2-recurrent-gdpp", 2.1, 0, 0)], cfg)
    assert [c.verdict() for c in good] == ["holds"] * 4
    assert [c.verdict() for c in bad] == ["does not hold"] * 4
    for c in good:
        assert c.threshold is not None and "1.02" not in c.threshold.origin
    loss, cos, eta, gdpp = good
    assert loss.threshold.limit == PAIRED_SES and "paired" in loss.threshold.origin
    assert cos.threshold.limit == 0.8 and "OLS" in cos.threshold.origin  # the null
    assert eta.threshold.limit == PAIRED_SES and gdpp.threshold.limit == PAIRED_SES
    assert loss.values == {"lsa-1": pytest.approx(1.0)}
    stuck = icl_claims([_row("lsa-1", 1.0, 0.999, 0.0, plateau="ended stuck on a plateau")], cfg)
    assert [c.verdict() for c in stuck] == ["no verdict: reduced scale"] * 3
    assert all(c.regime is not None and not c.regime.met for c in stuck)
    assert in_ses(0.0, 0.0) == 0.0 and in_ses(1.0, 0.0) == math.inf


def test_paired_loss_difference_is_a_numpy_loop():
    gen = torch.Generator().manual_seed(0)
    b, n, d = 50, 6, 3
    xc = torch.rand(b, n, d, generator=gen, dtype=torch.float64) - 0.5
    w = torch.randn(b, d, 1, generator=gen, dtype=torch.float64)
    xq = torch.rand(b, 2, d, generator=gen, dtype=torch.float64) - 0.5
    yc, yq = xc @ w, xq @ w
    a = task_losses(GD(1.0, 1).predict, xc, yc, xq, yq)
    c = task_losses(GD(0.5, 1).predict, xc, yc, xq, yq)
    want = []
    for t in range(b):
        x, y = xc[t].numpy(), yc[t].numpy()
        for eta, out in ((1.0, want),):
            w1 = eta * y.T @ x / n
            out.append(0.5 * np.mean((xq[t].numpy() @ w1.T - yq[t].numpy()) ** 2))
    np.testing.assert_allclose(a.numpy(), want, rtol=1e-12)
    mean, se = paired(a, c)
    diff = (a - c).numpy()
    assert mean == pytest.approx(diff.mean()) and se == pytest.approx(
        diff.std(ddof=1) / math.sqrt(b)
    )
