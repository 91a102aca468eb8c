"""``attnreg bench`` on tiny sizes: well-formed JSON and honest failure rows (no timing checks)."""

import json
import os
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
import sequence_refs as ref
import torch
from typer.testing import CliRunner

from attnreg.bench import (
    TARGETS,
    p1_ols,
    p2_retrieval,
    p3_linear_attention,
    p7_kernel_smoother,
    p8_floor,
    p8_sequence,
    p9_training,
    parse_ids,
    run_benchmarks,
)
from attnreg.bench import studies as bench_studies
from attnreg.bench.common import loglog_slope, time_interleaved
from attnreg.bench.limits import Limit, judge, target_text
from attnreg.bench.p7_kernel_smoother import p7_beta, p7_data, p7_reference, p7_smoother
from attnreg.bench.sequence_workload import attnreg_call, fla_calls, fla_output, workload_inputs
from attnreg.bench.sizes import SMOKE
from attnreg.cli import app
from attnreg.data.tasks import TaskSampler
from attnreg.training import generator

KEYS = {"id", "workload", "value", "unit", "target", "passed", "reference", "details"}


def _well_formed(row: dict) -> None:
    assert set(row) == KEYS
    assert row["id"] in TARGETS
    assert isinstance(row["passed"], bool)
    assert row["value"] is None or isinstance(row["value"], int | float)
    for key in ("workload", "unit", "target", "reference"):
        assert isinstance(row[key], str) and row[key]
    assert isinstance(row["details"], dict)
    assert isinstance(row["details"]["threads"], int)


def test_cli_smoke_dense_targets_print_well_formed_json():
    threads = torch.get_num_threads()
    try:
        result = CliRunner().invoke(
            app,
            ["bench", "--smoke", "--json", "--only", "P1,p2,P7", "--only", "P3", "--repeat", "1"],
        )
    finally:
        torch.set_num_threads(threads)
    doc = json.loads(result.stdout)
    assert set(doc) == {"run", "targets"}
    run, rows = doc["run"], doc["targets"]
    # exit status 1 exactly when a target failed (in smoke sizes timings may fail; nothing else)
    assert result.exit_code == (0 if all(r["passed"] for r in rows) else 1), result.output
    # the run names its date (UTC), machine and settings: a result file needs no notes beside it
    started = datetime.fromisoformat(run["date"].replace("Z", "+00:00"))
    assert started.utcoffset() == timedelta(0)
    assert abs(datetime.now(UTC) - started) < timedelta(hours=1)
    assert run["machine"]["cpu"] and run["machine"]["logical_cores"] == os.cpu_count()
    assert run["machine"]["memory_gib"] > 0
    assert run["threads"] == rows[0]["details"]["threads"] and run["smoke"] is True
    assert run["only"] == ["P1", "P2", "P3", "P7"] and run["repeat"] == 1 and run["seconds"] > 0
    assert run["torch"] == torch.__version__
    assert [r["id"] for r in rows] == ["P1", "P2", "P3", "P7"]
    for row in rows:
        _well_formed(row)
        assert "error" not in row["details"], row["details"]
        assert row["value"] is not None
        assert all(
            {"check", "value", "limit", "passed"} <= set(c) for c in row["details"]["checks"]
        )
    # the printed target and the checks both come from the module's LIMITS table
    modules = (p1_ols, p2_retrieval, p3_linear_attention, p7_kernel_smoother)
    for row, module in zip(rows, modules, strict=True):
        assert row["target"] == target_text(module.LIMITS)
        checks = row["details"]["checks"]
        assert [(c["check"], c["op"]) for c in checks] == [(x.name, x.op) for x in module.LIMITS]
        assert row["passed"] == all(c["passed"] for c in checks)
    y_scale = max(1.0, float(p7_data(3_000, 50, 4, 1)[1].abs().max()))  # the smoke sizes
    assert rows[3]["details"]["checks"][2]["limit"] == pytest.approx(1e-5 * y_scale, rel=1e-12)
    assert rows[3]["details"]["max_abs_diff_limit"] == rows[3]["details"]["checks"][2]["limit"]
    for row, module in zip(rows[:3], modules[:3], strict=True):
        assert [c["limit"] for c in row["details"]["checks"]] == [x.bound for x in module.LIMITS]
    p2 = rows[1]["details"]
    assert p2["peak_memory"]["peak_bytes"] > 0 and "extra_bytes" in p2["peak_memory"]
    assert p2["max_abs_diff_vs_sdpa"] < 1e-4
    assert rows[0]["details"]["max_abs_diff_vs_lstsq"] < 1e-8
    p7 = rows[3]["details"]
    assert p7["peak_memory"]["peak_bytes"] > 0 and "extra_bytes" in p7["peak_memory"]
    assert p7["max_abs_diff_vs_sdpa"] <= p7["max_abs_diff_limit"]
    assert p7["max_abs_diff_vs_float64_first_8_queries"] < 1e-5
    assert {c["check"] for c in p7["checks"]} >= {
        "time / SDPA (values zero-padded)",
        "peak extra memory (GiB)",
    }


@pytest.mark.parametrize("dy", [1, 3, 8])
def test_p7_smoother_equals_the_padded_sdpa_reference(dy):
    n, m, d = 2000, 17, 8
    x, y, xq = p7_data(n, m, d, dy, seed=3)
    beta = p7_beta(d)
    got = p7_smoother(x, y, xq, beta)()
    ref = p7_reference(x, y, xq, beta)()
    assert got.shape == ref.shape == (1, m, dy) and got.dtype == torch.float32
    assert float((got - ref).abs().max()) <= 1e-6
    # and both are the Nadaraya–Watson smoother: a float64 softmax over all keys
    exact = torch.softmax(beta * (xq.double() @ x.double().mT), dim=-1) @ y.double()
    assert torch.allclose(got.double(), exact, atol=1e-6, rtol=0)


def _p8_bound(layer: str, x: dict) -> torch.Tensor:
    """Twice the float32 rounding bound of ``layer`` on the P8 inputs ``x`` (both attnreg and
    fla are within one bound of the exact value), from the numpy references' magnitudes:
    elementwise ``4 u (d + n_t) Σ γ |q|ᵀ|k| |v|`` for linear attention, per position
    ``8 u (d + n_t) t ‖q_t‖ Σ γ β ‖k‖ ‖v‖`` for the delta rules and ``8 u (d + n_t)·(Mesa's
    perturbation bound)`` for Mesa (the bounds of tests/test_sequence_fla.py)."""
    q, k, v, beta = (x[n].double().numpy() for n in ("q", "k", "v", "beta"))
    d, t_len = q.shape[-1], q.shape[2]
    if layer in ("linear_attention", "delta_rule", "mesa"):
        alpha = np.ones(beta.shape)
    else:
        alpha = x["alpha"].double().numpy()
    n = d + ref.heads(ref.log_budget, alpha)
    if layer in ("mesa", "gated_mesa"):
        lam = np.broadcast_to(x["lam"].double().numpy(), (*q.shape[:2], d))
        _, parts = ref.heads(ref.decayed_ridge, q, k, v, beta, alpha, lam)
        return torch.from_numpy(16 * ref.U32 * n * parts)
    q = q * d**-0.5
    if layer == "linear_attention":
        _, mag = ref.heads(ref.weighted_sum, q, k, v, alpha)
        return torch.from_numpy(8 * ref.U32 * n[..., None] * mag)
    _, mags = ref.heads(ref.lms, q, k, v, beta, alpha)
    steps = np.arange(1, t_len + 1)
    return torch.from_numpy(16 * ref.U32 * n * steps * np.linalg.norm(q, axis=-1) * mags)


def test_p8_smoke_rows_are_consistent_and_agree_with_fla():
    """P8 on the smoke sizes: no error, its verdict follows its checks (from ``LIMITS``), every
    layer is timed beside fla's recurrence and chunked form, and attnreg's outputs agree with
    fla's recurrence within twice the float32 rounding bound; the recorded differences are the
    ones checked here."""
    threads = torch.get_num_threads()
    try:
        result = CliRunner().invoke(
            app, ["bench", "--smoke", "--json", "--only", "P8", "--threads", str(threads)]
        )
        rows = json.loads(result.stdout)["targets"]
        assert result.exit_code == (0 if all(r["passed"] for r in rows) else 1), result.output
        assert [r["id"] for r in rows] == ["P8"]
        row = rows[0]
        _well_formed(row)
        details = row["details"]
        assert "error" not in details, details
        assert row["target"] == target_text(p8_sequence.LIMITS)
        checks = details["checks"]
        assert [(c["check"], c["op"], c["limit"]) for c in checks] == [
            (x.name, x.op, x.bound) for x in p8_sequence.LIMITS
        ]
        assert row["passed"] == all(c["passed"] for c in checks)
        layers = details["layers"]
        assert list(layers) == [*p8_sequence.P8_LAYERS, *p8_sequence.REPORTED_LAYERS]
        speedups = [layers[n]["speedup_vs_fla_recurrent"] for n in p8_sequence.P8_LAYERS]
        assert row["value"] == checks[0]["value"] == min(speedups)
        ratios = [layers[n]["time_vs_fla_chunk"] for n in p8_sequence.P8_LAYERS]
        assert checks[1]["value"] == max(ratios)
        assert all("note" not in layers[n] for n in p8_sequence.P8_LAYERS)
        assert all(layers[n]["note"] for n in p8_sequence.REPORTED_LAYERS)
        x = p8_sequence.p8_inputs(SMOKE.p8_heads, SMOKE.p8_length, SMOKE.p8_d)
        for name, layer in layers.items():
            seconds = layer["seconds"]
            assert {"attnreg", "fla_recurrent", "fla_chunk"} <= set(seconds)
            speedup = seconds["fla_recurrent"] / seconds["attnreg"]
            assert layer["speedup_vs_fla_recurrent"] == speedup
            assert layer["peak_memory"]["peak_bytes"] > 0 and "extra_bytes" in layer["peak_memory"]
            with torch.no_grad():
                ours = attnreg_call(name, x)
                theirs = fla_output(name, fla_calls(name, x)["recurrent"]())
            diff = (ours - theirs).double()
            bound = _p8_bound(name, x)
            if name == "linear_attention":
                assert torch.all(diff.abs() <= bound), name
            else:
                assert torch.all(diff.norm(dim=-1) <= bound), name
            assert layer["max_abs_diff"] == float(diff.abs().max())  # the same threads
        floor = details["delta_wy_floor"]
        assert list(floor) == [str(c) for c in p8_floor.FLOOR_CHUNKS]
        delta = layers["delta_rule"]["seconds"]
        rate = details["matmul_rate_gflops_interleaved"] * 1e9
        for chunk, row in floor.items():
            sec = delta[f"wy_floor_c{chunk}"]
            assert row["seconds"] == sec
            # the rate went through GFLOP/s and back (÷1e9, ×1e9): a few units of rounding
            fraction = details["delta_useful_flops"] / sec / rate
            assert row["fraction_of_matmul_rate"] == pytest.approx(fraction, rel=8 * 2**-53)
            assert row["speedup_vs_fla_recurrent"] == delta["fla_recurrent"] / sec
        for name in p8_sequence.FRACTION_LAYERS:  # judged on the call timed beside the matmul
            sec = layers[name]["seconds"]
            local = 2.0 * SMOKE.matmul**3 / sec["matmul"]
            fraction = details["delta_useful_flops"] / sec["attnreg_beside_matmul"] / local
            assert layers[name]["fraction_of_matmul_rate"] == pytest.approx(fraction, rel=1e-12)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("chunk", p8_floor.FLOOR_CHUNKS)
def test_p8_floor_is_the_delta_rule_in_float64(chunk):
    """The floor's products, given the triangular inverses, compute DeltaNet: its output (queries
    scaled by ``d_k^{-1/2}``) equals the numpy LMS loop in float64, with segments of two blocks so
    that the state is carried between segments, within the delta rule's rounding bound."""
    x = workload_inputs(batch=2, heads=2, length=4 * chunk, d_k=8, d_v=5, dtype=torch.float64)
    got = p8_floor.unblock_output(p8_floor.wy_products(x, chunk, segment=2 * chunk)(), 2).numpy()
    q, k, v, beta = (x[n].numpy() for n in ("q", "k", "v", "beta"))
    q = q * 8**-0.5
    want, mags = ref.heads(ref.lms, q, k, v, beta, np.ones(beta.shape))
    steps = np.arange(1, 4 * chunk + 1)
    bound = 8 * ref.U64 * (8 + steps) * steps * np.linalg.norm(q, axis=-1) * mags
    assert np.all(np.linalg.norm(got - want, axis=-1) <= bound)


def _gd_in_numpy(tasks) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One GD step from W0 = 0 at η = 1, ``g = x_qᵀ XᵀY / N``, in float64 numpy, the query
    targets, and the magnitude ``|x_q|ᵀ|X|ᵀ|Y| / N`` of each ``g`` (for round-off bounds)."""
    x, y, q = (t.double().numpy() for t in (tasks.x_ctx, tasks.y_ctx, tasks.x_query))
    n = x.shape[1]
    g = np.einsum("bmd,bnd,bnk->bmk", q, x, y) / n
    size = np.einsum("bmd,bnd,bnk->bmk", np.abs(q), np.abs(x), np.abs(y)) / n
    return g, tasks.y_query.double().numpy(), size


def test_p4_smoke_runs_the_icl_workload_and_its_gd_reference_is_right():
    """P4 runs its three seeds without error, its verdict follows its checks, and each seed's
    line-searched η and GD loss equal a numpy line search / loss on the same tasks."""
    results, context = run_benchmarks(["P4"], repeat=1, threads=1, smoke=True)
    row = results[0].row()
    _well_formed(row)
    assert context["threads"] == 1
    details = row["details"]
    assert "error" not in details, details
    runs = details["runs"]
    assert [r["seed"] for r in runs] == [0, 1, 2]
    assert row["passed"] == all(c["passed"] for c in details["checks"])
    assert row["value"] == pytest.approx(sorted(r["measured_wall_seconds"] for r in runs)[1])
    sampler, u32 = TaskSampler(), 2.0**-24
    for r in runs:
        fit = sampler.sample(200, generator(2 * 10**6 + r["seed"]), torch.float32)
        test = sampler.sample(200, generator(10**6 + r["seed"]), torch.float32)
        g, yq, size = _gd_in_numpy(fit)
        eta = float((g * yq).sum() / (g * g).sum())
        # float32 chains of about N·d + tasks roundings, relative to what they cancel
        gamma = (fit.x_ctx.shape[1] * fit.x_ctx.shape[2] + len(g)) * u32
        bound = gamma * eta * (2 * (size * np.abs(yq)).sum() / abs((g * yq).sum()) + 2)
        assert abs(r["gd_eta"] - eta) <= bound
        g, yq, size = _gd_in_numpy(test)
        loss = 0.5 * float(np.mean((r["gd_eta"] * g - yq) ** 2))
        err = np.abs(r["gd_eta"] * g - yq)
        loss_bound = gamma * float(np.mean(err * (r["gd_eta"] * size + np.abs(yq))))
        assert abs(r["gd_loss"] - loss) <= loss_bound
        assert r["ratio"] == pytest.approx(r["test_loss"] / r["gd_loss"], rel=1e-12)


def test_missing_study_function_is_a_failure_not_a_pass(monkeypatch):
    def missing(module, name):
        raise LookupError(f"{module} has no {name} yet")

    monkeypatch.setattr(bench_studies, "_lookup", missing)
    results, _ = run_benchmarks(["P4", "P5", "P6"], repeat=1, threads=1, smoke=True)
    assert [r.id for r in results] == ["P4", "P5", "P6"]
    for result in results:
        row = result.row()
        _well_formed(row)
        assert row["passed"] is False and row["value"] is None
        assert row["details"]["error"].startswith("not available")


def test_a_failing_workload_is_reported_not_raised(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("attnreg.bench.p1_ols.bench_p1", broken)
    results, _ = run_benchmarks(["P1"], repeat=1, threads=1, smoke=True)
    assert results[0].passed is False and "boom" in results[0].details["error"]


def test_parse_ids_and_unknown_target():
    assert parse_ids(None) == list(TARGETS)
    assert parse_ids(["p3,P1", "P1"]) == ["P1", "P3"]
    with pytest.raises(ValueError, match="valid: P1"):
        parse_ids(["P10"])
    result = CliRunner().invoke(app, ["bench", "--only", "P10"])
    assert result.exit_code != 0


def test_help_lists_every_option():
    out = CliRunner().invoke(app, ["bench", "--help"], terminal_width=200).output
    for option in ("--only", "--json", "--repeat", "--threads", "--smoke", "--progress"):
        assert option in out


def test_helpers():
    times = time_interleaved({"a": lambda: None, "b": lambda: None}, repeat=3)
    assert set(times) == {"a", "b"} and all(len(v) == 3 for v in times.values())
    assert loglog_slope([1e5, 3e5, 1e6], [1.0, 3.0, 10.0]) == pytest.approx(1.0)


def test_limits_are_the_one_source_of_target_text_and_checks():
    limits = (
        Limit("time / ref", "<=", 3.0, "{op} {bound:g}× the reference"),
        Limit("rate", ">=", 0.7, "{op} {bound:.2f} of the matmul rate"),
        Limit("exit status", "<=", 0.0, "exit status 0"),
        Limit("hidden", "<=", 1.0, ""),
    )
    assert target_text(limits) == "≤ 3× the reference; ≥ 0.70 of the matmul rate; exit status 0"
    rows = judge(
        limits,
        {"time / ref": 3.0, "rate": 0.69, "exit status": None, "hidden": 2.0},
        {"hidden": 2.5},
    )
    assert [r["passed"] for r in rows] == [True, False, False, True]  # 3 ≤ 3; 0.69 < 0.7
    assert [r["limit"] for r in rows] == [3.0, 0.7, 0.0, 2.5]
    assert not judge(limits[:1], {"time / ref": float("nan")})[0]["passed"]
    with pytest.raises(ValueError, match="missing"):
        judge(limits, {"time / ref": 1.0})
    with pytest.raises(ValueError, match="op"):
        Limit("x", "<", 1.0, "")


def test_every_target_states_each_of_its_limits():
    tables = {
        "P1": p1_ols.LIMITS,
        "P2": p2_retrieval.LIMITS,
        "P3": p3_linear_attention.LIMITS,
        "P4": bench_studies.P4_LIMITS,
        "P5": bench_studies.P5_LIMITS,
        "P6": bench_studies.P6_LIMITS,
        "P7": p7_kernel_smoother.LIMITS,
        "P8": p8_sequence.LIMITS,
        "P9": p9_training.LIMITS,
    }
    assert sorted(tables) == list(TARGETS)
    for limits in tables.values():
        text = target_text(limits)
        assert len({x.name for x in limits}) == len(limits)
        for limit in limits:
            assert limit.describe() in text
            if "{bound" in limit.text:  # the number in the text is the one checked against
                assert f"{limit.bound:g}" in limit.describe() or f"{limit.bound:.2f}" in text


def test_p9_smoke_row_follows_its_checks():
    """P9 on the smoke sizes: fused, chunked and fla's chunked training steps all run, the verdict
    follows the one check, and the value is the ratio of the recorded medians."""
    row = p9_training.bench_p9(SMOKE, 1).row()
    details = row["details"]
    assert row["target"] == target_text(p9_training.LIMITS)
    seconds = details["seconds"]
    assert set(seconds) == {"fused", "chunk", "fused_beside_fla", "fla_chunk"}
    assert row["value"] == seconds["chunk"] / seconds["fused"]
    # fla's reference is compared with the fused step timed in its own alternation
    assert details["fla_chunk_over_fused"] == seconds["fla_chunk"] / seconds["fused_beside_fla"]
    assert row["passed"] == all(c["passed"] for c in details["checks"])
    assert details["first_call_seconds"] > 0
