"""The training loop: convergence on a known minimum, determinism, early stop, plateaus,
checkpoints (weights_only)."""

from __future__ import annotations

import math
import pickle
import warnings

import pytest
import torch

from attnreg.checkpoints import load_checkpoint, save_checkpoint
from attnreg.core.threads import torch_threads
from attnreg.data.tasks import query_loss, von_oswald_tasks
from attnreg.models import TrainableLSA, load_model, save_model
from attnreg.plateaus import PlateauWarning, find_plateaus
from attnreg.training import TrainConfig, generator, train


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


def test_periodic_checkpoint_holds_the_parameters_and_optimizer_of_its_step(tmp_path) -> None:
    # a 6-step run interrupted when step 5 starts leaves its step-4 checkpoint: the parameters
    # and the Adam state after exactly 4 steps, those of a reference loop of torch.optim.Adam
    path = tmp_path / "train.pt"
    target = torch.arange(3.0)
    p = torch.zeros(3, requires_grad=True)

    def loss_fn(step: int) -> torch.Tensor:
        if step == 5:
            raise KeyboardInterrupt
        return (p - target).pow(2).sum()

    cfg = TrainConfig(
        steps=6, lr=0.05, clip=None, eval_every=100, checkpoint_path=str(path), checkpoint_every=4
    )
    with pytest.raises(KeyboardInterrupt):
        train([p], loss_fn, cfg, progress=False)
    ckpt = load_checkpoint(path)
    assert ckpt.meta["kind"] == "train-state" and ckpt.meta["step"] == 4
    assert not ckpt.meta["finished"]
    assert len(ckpt.meta["result"]["losses"]) == 4

    q = torch.zeros(3, requires_grad=True)
    reference = torch.optim.Adam([q], lr=0.05)
    for _ in range(4):
        reference.zero_grad()
        (q - target).pow(2).sum().backward()
        reference.step()
    assert torch.allclose(ckpt.state["param0"], q.detach(), rtol=0, atol=1e-6)
    saved = ckpt.extra["optimizer"]["state"][0]
    assert float(saved["step"]) == 4
    assert torch.allclose(saved["exp_avg"], reference.state[q]["exp_avg"], atol=1e-6)
    assert torch.allclose(saved["exp_avg_sq"], reference.state[q]["exp_avg_sq"], atol=1e-6)
    # the whole training checkpoint is readable by plain torch.load(weights_only=True)
    raw = torch.load(path, weights_only=True)
    assert set(raw) == {"format", "version", "state", "meta", "extra"}


def test_default_optimizer_is_adam_with_clipping_and_the_cosine_schedule() -> None:
    # reference: Adam (Kingma & Ba 2015, L2 weight decay added to the gradient), global-norm
    # clipping and the cosine rate, written out here in float64
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(7, 3, generator=gen, dtype=torch.float64)
    b = torch.randn(7, generator=gen, dtype=torch.float64)
    start = torch.randn(3, generator=gen, dtype=torch.float64)
    steps, lr, lr_final, clip, wd, (b1, b2) = 40, 0.1, 0.05, 0.5, 0.01, (0.8, 0.99)
    cfg = TrainConfig(
        steps=steps,
        lr=lr,
        schedule="cosine",
        lr_final=lr_final,
        clip=clip,
        weight_decay=wd,
        betas=(b1, b2),
        eval_every=100,
    )
    p = start.clone().requires_grad_(True)
    res = train([p], lambda step: (a @ p - b).pow(2).sum(), cfg, progress=False)

    q = start.clone()
    m, v = torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    losses = []
    for t in range(steps):
        losses.append(float((a @ q - b).pow(2).sum()))
        g = 2 * a.T @ (a @ q - b)
        norm = float(g.norm())
        if norm > clip:
            g = g * (clip / (norm + 1e-6))
        g = g + wd * q
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        rate = lr * (lr_final + (1 - lr_final) * 0.5 * (1 + math.cos(math.pi * t / steps)))
        m_hat, v_hat = m / (1 - b1 ** (t + 1)), v / (1 - b2 ** (t + 1))
        q = q - rate * m_hat / (v_hat.sqrt() + 1e-8)
    assert torch.allclose(p.detach(), q, rtol=0, atol=1e-12)
    assert res.losses == pytest.approx(losses, rel=1e-12)
    # the run really moved (the comparison is not between two starting points)
    assert float((q - start).norm()) > 0.1


def test_a_given_optimizer_is_used() -> None:
    # SGD with momentum through train() == the same torch.optim.SGD driven by a loop here
    gen = torch.Generator().manual_seed(6)
    a = torch.randn(5, 2, generator=gen, dtype=torch.float64)
    b = torch.randn(5, generator=gen, dtype=torch.float64)
    p = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    q = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    cfg = TrainConfig(steps=25, clip=None, eval_every=100)
    sgd = torch.optim.SGD([p], lr=0.01, momentum=0.9)
    train([p], lambda step: (a @ p - b).pow(2).sum(), cfg, optimizer=sgd, progress=False)
    reference = torch.optim.SGD([q], lr=0.01, momentum=0.9)
    for _ in range(25):
        reference.zero_grad()
        (a @ q - b).pow(2).sum().backward()
        reference.step()
    assert torch.equal(p.detach(), q.detach())
    assert float(q.detach().norm()) > 0.05
    other = torch.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="optimizer"):
        train([p], lambda s: p.sum(), cfg, optimizer=torch.optim.SGD([other], lr=0.1))
    with pytest.raises(ValueError, match="optimizer"):
        train([p], lambda s: p.sum(), cfg, optimizer="adam")  # type: ignore[arg-type]


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
    with pytest.raises(ValueError, match="checkpoint_every"):
        TrainConfig(checkpoint_every=10)
    with pytest.raises(ValueError, match="betas"):
        TrainConfig(betas=(0.9,))  # type: ignore[arg-type]
    p = torch.zeros(1, requires_grad=True)
    with pytest.raises(ValueError, match="generators"):
        train([p], lambda s: p.sum(), TrainConfig(steps=1), generators=[0])  # type: ignore[list-item]


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


def test_optimizer_state_round_trips_through_a_checkpoint(tmp_path) -> None:
    # an Adam state_dict (ints, floats, tuples, int keys, tensors) saved in ``extra`` and loaded
    # with weights_only: a fresh optimizer loaded from it continues exactly like the original
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    b = torch.randn(5, generator=gen, dtype=torch.float64)
    p1 = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    opt1 = torch.optim.Adam([p1], lr=0.1, weight_decay=0.01)

    def step(p: torch.Tensor, opt: torch.optim.Optimizer) -> None:
        opt.zero_grad()
        (a @ p - b).pow(2).sum().backward()
        opt.step()

    for _ in range(5):
        step(p1, opt1)
    path = save_checkpoint(
        tmp_path / "opt.pt", {"p": p1}, {"note": "x"}, {"optimizer": opt1.state_dict()}
    )
    ckpt = load_checkpoint(path)
    assert ckpt.extra["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.999)
    p2 = ckpt.state["p"].clone().requires_grad_(True)
    opt2 = torch.optim.Adam([p2], lr=0.5)
    opt2.load_state_dict(ckpt.extra["optimizer"])
    assert opt2.param_groups[0]["lr"] == 0.1
    for _ in range(5):
        step(p1, opt1)
        step(p2, opt2)
    assert torch.equal(p1.detach(), p2.detach())
    # without extra, the file keeps its former layout and extra reads as {}
    plain = save_checkpoint(tmp_path / "plain.pt", {"a": torch.zeros(1)})
    assert load_checkpoint(plain).extra == {}
    with pytest.raises(ValueError, match="extra"):
        save_checkpoint(tmp_path / "bad.pt", {"a": torch.zeros(1)}, None, {"x": [object()]})
    with pytest.raises(ValueError, match="extra"):
        save_checkpoint(tmp_path / "bad.pt", {"a": torch.zeros(1)}, None, {"x": {1.5: 0}})


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_model_loads_exactly_in_its_dtype(tmp_path, dtype) -> None:
    model = TrainableLSA(4, seed=2, init_scale=0.3).to(dtype)
    path = save_model(tmp_path / "half.pt", model)
    loaded, meta = load_model(path)
    assert meta["dtype"] == str(dtype)
    for key, value in model.state_dict().items():
        got = loaded.state_dict()[key]
        assert got.dtype == dtype and torch.equal(got, value), key


def test_a_checkpoint_whose_tensors_and_dtype_disagree_is_refused(tmp_path) -> None:
    # float32 weights with a float16 dtype would be rounded; float16 weights with a float32
    # dtype would not be the stored model: both are refused, naming the checkpoint
    model = TrainableLSA(4, seed=2, init_scale=0.3)
    info = {"model": model.kind, "spec": model.spec()}
    cases = [
        (model.state_dict(), "torch.float16"),
        (model.state_dict(), "torch.bfloat16"),
        (model.to(torch.float16).state_dict(), "torch.float32"),
    ]
    for i, (state, dtype) in enumerate(cases):
        path = save_checkpoint(tmp_path / f"m{i}.pt", state, info | {"dtype": dtype})
        with pytest.raises(ValueError, match=r"checkpoint: .*dtype"):
            load_model(path)
