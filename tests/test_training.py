"""The training loop: convergence on a known minimum, determinism, early stop, plateaus,
checkpoints (weights_only)."""

from __future__ import annotations

import pickle
import warnings

import pytest
import torch

from attnreg.checkpoints import load_checkpoint, save_checkpoint
from attnreg.core.threads import torch_threads
from attnreg.data.tasks import query_loss, von_oswald_tasks
from attnreg.models import TrainableLSA, load_model, save_model
from attnreg.training import (
    PlateauWarning,
    TrainConfig,
    find_plateaus,
    generator,
    train,
)


def test_adam_reaches_the_minimum_of_a_quadratic() -> None:
    # minimiser of ‖A p − b‖² is the least-squares solution, computed independently by numpy
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(6, 3, generator=gen, dtype=torch.float64)
    b = torch.randn(6, generator=gen, dtype=torch.float64)
    p = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    cfg = TrainConfig(steps=600, lr=0.1, schedule="cosine", clip=None, eval_every=100)
    train([p], lambda step: (a @ p - b).pow(2).sum(), cfg, progress=False)
    import numpy as np

    expected = np.linalg.lstsq(a.numpy(), b.numpy(), rcond=None)[0]
    assert np.allclose(p.detach().numpy(), expected, atol=1e-4)


def test_periodic_checkpoint_holds_the_parameters_of_its_step(tmp_path) -> None:
    # the step-4 checkpoint of a 6-step run must hold the parameters after exactly 4 Adam
    # steps: those of a rerun that stops at step 4 (training is deterministic)
    path = tmp_path / "train.pt"
    target = torch.arange(3.0)

    def run(steps: int, **extra: object) -> torch.Tensor:
        p = torch.zeros(3, requires_grad=True)
        cfg = TrainConfig(
            steps=steps, lr=0.05, schedule="constant", clip=None, eval_every=100, **extra
        )
        train([p], lambda step: (p - target).pow(2).sum(), cfg, progress=False)
        return p.detach()

    run(6, checkpoint_path=str(path), checkpoint_every=4)
    ckpt = load_checkpoint(path)
    assert ckpt.meta == {"step": 4, "kind": "train-state"}
    assert torch.equal(ckpt.state["param0"], run(4))


def _lsa_run(seed: int, steps: int = 40) -> tuple[list[float], TrainableLSA]:
    sampler = von_oswald_tasks()
    model = TrainableLSA(10, seed=seed)
    gen = generator(seed)

    def loss_fn(step: int) -> torch.Tensor:
        t = sampler.sample(256, gen)
        return query_loss(model.forward_predict(t.x_ctx, t.y_ctx, t.x_query), t.y_query)

    with torch_threads(1):
        res = train(
            model,
            loss_fn,
            TrainConfig(steps=steps, lr=3e-2, seed=seed, eval_every=10),
            progress=False,
        )
    return res.losses, model


def test_training_a_one_layer_lsa_lowers_the_loss() -> None:
    losses, _ = _lsa_run(0)
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.9 * first


def test_same_seed_same_numbers_other_seed_other_numbers() -> None:
    a, _ = _lsa_run(1, 15)
    b, _ = _lsa_run(1, 15)
    c, _ = _lsa_run(2, 15)
    assert a == b
    assert a != c


def test_early_stop_on_patience_and_restore_best() -> None:
    p = torch.zeros(1, requires_grad=True)
    metrics = iter([3.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0])
    seen: list[float] = []

    def eval_fn() -> float:
        seen.append(float(p.detach()))
        return next(metrics)

    cfg = TrainConfig(steps=100, lr=0.1, eval_every=2, patience=3, restore_best=True)
    res = train([p], lambda s: (p - 5).pow(2).sum(), cfg, eval_fn, progress=False)
    assert res.stopped == "patience"
    assert [s for s, _ in res.evals] == [2, 4, 6, 8, 10]
    assert res.best_step == 4
    assert float(p.detach()) == pytest.approx(seen[1])  # parameters from the best evaluation


def test_stop_below() -> None:
    p = torch.tensor([4.0], requires_grad=True)
    cfg = TrainConfig(steps=1000, lr=0.1, eval_every=1, stop_below=0.01, clip=None)
    res = train([p], lambda s: p.pow(2).sum(), cfg, lambda: float(p.pow(2).sum()), progress=False)
    assert res.stopped == "stop_below"
    assert res.evals[-1][1] <= 0.01
    assert res.steps_run < 1000


def test_plateau_detection_escaped_stuck_and_converged() -> None:
    escaped = [1.0] * 400 + [1.0 - 0.9 * k / 100 for k in range(100)] + [0.1] * 100
    found = find_plateaus(escaped, 50, 0.01)
    assert found and found[0].escaped and found[0].start == 0 and found[0].end >= 400
    stuck = [1.0] * 600
    found = find_plateaus(stuck, 50, 0.01)
    assert len(found) == 1 and not found[0].escaped
    converged = [1.0 - 0.9 * k / 100 for k in range(100)] + [0.1] * 500
    assert find_plateaus(converged, 50, 0.01, reference_loss=0.1) == []
    # the same flat end above a reference is stuck
    assert not find_plateaus(converged, 50, 0.01, reference_loss=0.05)[0].escaped


def test_a_run_stuck_on_a_plateau_is_told() -> None:
    p = torch.zeros(1, requires_grad=True)
    cfg = TrainConfig(steps=300, lr=1e-3, plateau_window=50, eval_every=50)
    with pytest.warns(PlateauWarning):
        res = train([p], lambda s: 0.0 * p.sum() + 1.0, cfg, progress=False)
    assert res.stuck
    assert "stuck" in (res.plateau_summary() or "")


def test_bad_config_and_params() -> None:
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="schedule"):
        TrainConfig(schedule="linear")
    with pytest.raises(ValueError, match="model_or_params"):
        train([torch.zeros(1)], lambda s: torch.zeros(()), TrainConfig(steps=1), progress=False)


def test_checkpoint_round_trip(tmp_path) -> None:
    _, model = _lsa_run(3, 5)
    path = save_model(tmp_path / "m.pt", model, {"n_ctx": 10})
    loaded, meta = load_model(path)
    assert meta["n_ctx"] == 10 and meta["model"] == "lsa"
    t = von_oswald_tasks().sample(8, generator(9))
    assert torch.equal(
        model.predict(t.x_ctx, t.y_ctx, t.x_query), loaded.predict(t.x_ctx, t.y_ctx, t.x_query)
    )
    # the file is readable by plain torch.load(weights_only=True)
    raw = torch.load(path, weights_only=True)
    assert set(raw) == {"format", "version", "state", "meta"}


class _Evil:
    def __reduce__(self):
        return (print, ("executed",))


def test_a_file_that_is_not_ours_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint at all")
    with pytest.raises(ValueError, match="checkpoint"):
        load_checkpoint(junk)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    with pytest.raises(ValueError, match="not an attnreg checkpoint"):
        load_checkpoint(foreign)
    evil = tmp_path / "evil.pt"
    evil.write_bytes(pickle.dumps({"format": _Evil()}, protocol=2))
    with pytest.raises(ValueError, match="checkpoint"):
        load_checkpoint(evil)
    plain = save_checkpoint(tmp_path / "plain.pt", {"a": torch.zeros(1)}, {"note": "x"})
    with pytest.raises(ValueError, match="no attnreg model"):
        load_model(plain)
    with pytest.raises(ValueError, match="meta"):
        save_checkpoint(tmp_path / "bad.pt", {"a": torch.zeros(1)}, {"obj": object()})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_checkpoint(plain).meta == {"note": "x"}


def test_adam_matches_torch_optim_adam() -> None:
    from attnreg.training import Adam

    gen = torch.Generator().manual_seed(5)
    a = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    b = torch.randn(5, generator=gen, dtype=torch.float64)
    p1 = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    p2 = p1.detach().clone().requires_grad_(True)
    reference = torch.optim.Adam([p1], lr=0.1, weight_decay=0.01)
    ours = Adam([p2], lr=0.1, weight_decay=0.01)
    for _ in range(30):
        for p, opt in ((p1, reference), (p2, ours)):
            p.grad = None
            (a @ p - b).pow(2).sum().backward()
            opt.step()
    assert torch.allclose(p1, p2, atol=1e-12)
