"""Resumable training: a run interrupted (in process, or by SIGKILL of its process) and resumed
from its last checkpoint ends with exactly the numbers of an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from attnreg.checkpoints import (
    TrainState,
    load_checkpoint,
    load_train_state,
    save_checkpoint,
    save_train_state,
)
from attnreg.core.threads import torch_threads
from attnreg.data.tasks import query_loss, von_oswald_tasks
from attnreg.models import TrainableLSA
from attnreg.training import TrainConfig, TrainResult, generator, train

STEPS = 60
EVERY = 10


def resumable_run(
    checkpoint: str | None,
    resume: bool = False,
    delay: float = 0.0,
    interrupt_at: int | None = None,
    generators: bool = True,
    **changes: Any,
) -> tuple[TrainResult, dict[str, torch.Tensor]]:
    """A small online run that uses everything a checkpoint must carry: Adam state, the cosine
    schedule, clipping, restore_best, a data generator and the global torch RNG (noise on the
    targets). ``interrupt_at``: raise KeyboardInterrupt when that step starts; ``delay``:
    seconds of sleep per step (so that a process can be killed mid-run)."""
    sampler = von_oswald_tasks()
    model = TrainableLSA(10, seed=3)
    gen = generator(3)
    test = sampler.sample(256, generator(99))

    def loss_fn(step: int) -> torch.Tensor:
        if delay:
            time.sleep(delay)
        if interrupt_at is not None and step == interrupt_at:
            raise KeyboardInterrupt
        t = sampler.sample(64, gen)
        target = t.y_query + 0.01 * torch.randn(t.y_query.shape)  # the global RNG
        return query_loss(model.forward_predict(t.x_ctx, t.y_ctx, t.x_query), target)

    def eval_fn() -> float:
        return float(
            query_loss(model.forward_predict(test.x_ctx, test.y_ctx, test.x_query), test.y_query)
        )

    settings: dict[str, Any] = {
        "steps": STEPS,
        "lr": 3e-2,
        "schedule": "cosine",
        "clip": 0.05,
        "seed": 3,
        "eval_every": 7,
        "restore_best": True,
        "checkpoint_path": checkpoint,
        "checkpoint_every": EVERY if checkpoint else None,
    }
    settings.update(changes)
    with torch_threads(1):
        result = train(
            model,
            loss_fn,
            TrainConfig(**settings),
            eval_fn,
            progress=False,
            generators=[gen] if generators else (),
            resume=resume,
        )
    return result, {k: v.clone() for k, v in model.state_dict().items()}


def _same_run(
    a: tuple[TrainResult, dict[str, torch.Tensor]], b: tuple[TrainResult, dict[str, torch.Tensor]]
) -> None:
    (ra, pa), (rb, pb) = a, b
    assert ra.losses == rb.losses
    assert ra.evals == rb.evals
    assert (ra.best_step, ra.best_metric, ra.stopped) == (rb.best_step, rb.best_metric, rb.stopped)
    assert pa.keys() == pb.keys()
    for key in pa:
        assert torch.equal(pa[key], pb[key]), key


def test_in_process_interrupt_and_resume_gives_the_uninterrupted_numbers(tmp_path) -> None:
    path = str(tmp_path / "run.pt")
    reference = resumable_run(None)
    assert len(reference[0].losses) == STEPS
    with pytest.raises(KeyboardInterrupt):
        resumable_run(path, resume=True, interrupt_at=25)
    ckpt = load_checkpoint(path)
    assert ckpt.meta["step"] == 20 and not ckpt.meta["finished"]
    assert len(ckpt.meta["result"]["losses"]) == 20
    # the first 20 losses of the interrupted run are those of the uninterrupted one
    assert ckpt.meta["result"]["losses"] == reference[0].losses[:20]
    resumed = resumable_run(path, resume=True)
    _same_run(resumed, reference)
    assert load_checkpoint(path).meta["finished"]


def test_without_the_generator_in_the_checkpoint_the_resumed_run_differs(tmp_path) -> None:
    # the control: the generator state is what makes the resumed data stream the same
    path = str(tmp_path / "run.pt")
    reference = resumable_run(None, generators=False)
    with pytest.raises(KeyboardInterrupt):
        resumable_run(path, resume=True, interrupt_at=25, generators=False)
    resumed = resumable_run(path, resume=True, generators=False)
    assert resumed[0].losses[:20] == reference[0].losses[:20]
    assert resumed[0].losses[20:] != reference[0].losses[20:]


def test_resuming_a_finished_run_returns_its_result_without_training(tmp_path) -> None:
    path = str(tmp_path / "run.pt")
    first = resumable_run(path, resume=True)
    again = resumable_run(path, resume=True, interrupt_at=0)  # loss_fn would raise if called
    _same_run(again, first)


def test_a_checkpoint_of_another_run_is_refused(tmp_path) -> None:
    path = str(tmp_path / "run.pt")
    with pytest.raises(KeyboardInterrupt):
        resumable_run(path, resume=True, interrupt_at=15)
    with pytest.raises(ValueError, match=r"checkpoint: .*another config \(differs in lr\)"):
        resumable_run(path, resume=True, lr=1e-2)
    with pytest.raises(ValueError, match=r"checkpoint: .*generator"):
        resumable_run(path, resume=True, generators=False)
    # a different checkpoint_every does not change the numbers: allowed
    resumed = resumable_run(path, resume=True, checkpoint_every=3)
    _same_run(resumed, resumable_run(None))
    with pytest.raises(ValueError, match="resume"):
        resumable_run(None, resume=True)


def test_train_state_round_trip_and_mismatches(tmp_path) -> None:
    """save_train_state / load_train_state directly: the parameters, optimiser, RNG and
    generator states come back (checked against torch's own objects), and a checkpoint that
    does not fit the parameters, config or optimiser is a ValueError naming checkpoint."""
    path = tmp_path / "state.pt"
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    opt = torch.optim.SGD([w], lr=0.1, momentum=0.9)
    w.grad = torch.tensor([0.5, 0.25], dtype=torch.float64)
    opt.step()
    gen = torch.Generator().manual_seed(11)
    torch.rand(3, generator=gen)
    torch.manual_seed(5)
    state = TrainState(7, False, {"lr": 0.1}, {"losses": [1.0, 0.5]}, [w.detach().clone()])
    save_train_state(path, {"w": w}, state, opt, None, [gen])
    expected_gen, expected_rng = torch.rand(4, generator=gen), torch.rand(4)
    saved_w, saved_momentum = w.detach().clone(), opt.state[w]["momentum_buffer"].clone()

    w2 = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
    opt2 = torch.optim.SGD([w2], lr=0.1, momentum=0.9)
    gen2 = torch.Generator().manual_seed(0)
    got = load_train_state(path, {"w": w2}, {"lr": 0.1}, opt2, None, [gen2])
    assert (got.step, got.finished, got.progress) == (7, False, {"losses": [1.0, 0.5]})
    assert got.best_state is not None and torch.equal(got.best_state[0], saved_w)
    assert torch.equal(w2.detach(), saved_w)
    assert torch.equal(opt2.state_dict()["state"][0]["momentum_buffer"], saved_momentum)
    assert torch.equal(torch.rand(4, generator=gen2), expected_gen)
    assert torch.equal(torch.rand(4), expected_rng)

    def load(params, config=None, optimizer=None, generators=1):
        optimizer = optimizer or torch.optim.SGD(list(params.values()), lr=0.1, momentum=0.9)
        gens = [torch.Generator() for _ in range(generators)]
        return load_train_state(path, params, config or {"lr": 0.1}, optimizer, None, gens)

    zeros = torch.zeros(2, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"checkpoint: .*holds tensors \['w'\]"):
        load({"v": zeros.clone().requires_grad_()})
    with pytest.raises(ValueError, match=r"checkpoint: .*'w' is torch.float64 \(2,\)"):
        load({"w": torch.zeros(3, dtype=torch.float64, requires_grad=True)})
    with pytest.raises(ValueError, match=r"checkpoint: .*differs in lr"):
        load({"w": zeros.clone().requires_grad_()}, config={"lr": 0.2})
    with pytest.raises(ValueError, match=r"checkpoint: .*1 generator states; generators has 2"):
        load({"w": zeros.clone().requires_grad_()}, generators=2)
    two = [zeros.clone().requires_grad_(), zeros.clone().requires_grad_()]
    with pytest.raises(ValueError, match=r"checkpoint: .*does not fit this optimizer"):
        load({"w": two[0]}, optimizer=torch.optim.SGD([{"params": [two[0]]}, {"params": [two[1]]}]))
    model_file = tmp_path / "model.pt"
    save_checkpoint(model_file, {"w": zeros}, {"kind": "model"})
    with pytest.raises(ValueError, match=r"checkpoint: .*not a training checkpoint"):
        load_train_state(model_file, {"w": zeros}, {}, torch.optim.SGD([w2], lr=0.1), None, [])


_CHILD = """
import sys
sys.path.insert(0, {tests!r})
import torch
from test_training_resume import resumable_run
result, state = resumable_run({path!r}, resume=True, delay={delay!r})
torch.save({{"losses": result.losses, "evals": result.evals, "best": result.best_step,
            "state": state}}, {out!r})
"""


def _child(path: Path, out: Path, delay: float) -> subprocess.Popen[bytes]:
    code = _CHILD.format(
        tests=str(Path(__file__).parent), path=str(path), out=str(out), delay=delay
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def test_a_killed_process_resumes_to_the_numbers_of_an_uninterrupted_run(tmp_path) -> None:
    path, out = tmp_path / "run.pt", tmp_path / "out.pt"
    # 60 steps at >= 0.1 s each: the run lasts >= 6 s after its first checkpoint (step 10)
    proc = _child(path, out, delay=0.1)
    deadline = time.monotonic() + 120
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1].decode()
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    killed_at = load_checkpoint(path).meta
    assert not killed_at["finished"] and 0 < killed_at["step"] < STEPS
    assert not out.exists()

    resumed_proc = _child(path, out, delay=0.0)
    _, err = resumed_proc.communicate(timeout=300)
    assert resumed_proc.returncode == 0, err.decode()
    resumed = torch.load(out, weights_only=True)

    reference, state = resumable_run(None)
    assert resumed["losses"] == reference.losses
    assert [tuple(e) for e in resumed["evals"]] == reference.evals
    assert resumed["best"] == reference.best_step
    for key, value in state.items():
        assert torch.equal(resumed["state"][key], value), key
