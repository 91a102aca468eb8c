"""``icl`` — trained linear transformers learn gradient descent.

von Oswald et al. (2023), "Transformers learn in-context by gradient descent"; Ahn et al.
(2023) for Gaussian inputs and preconditioning; Garg et al. (2022) for the loss against the
number of context examples; Akyürek et al. (2023) for comparing trained models with GD / ridge
/ OLS on the same tasks.

Setup (their code's convention): ``d = N = 10``, ``x ~ U(−0.5, 0.5)``, ``w ~ N(0, I)``,
``y = wᵀx``, loss ``0.5 × MSE`` on the query, evaluation on 10,000 tasks. Models are trained
online (a fresh batch of ``batch`` tasks per Adam step: 2048 as in their code in the full
profile, 1024 in the quick one) by :func:`attnreg.training.train`.

References are fitted on a separate set of ``fit_tasks`` tasks and evaluated on the same
evaluation tasks as the models: GD with the line-searched η (exact: the one-step prediction is
linear in η), K-step GD, GD++ with fitted ``(η, γ)``, preconditioned GD with the fitted and
(Gaussian inputs) the optimal ``Γ* = ((1 + 1/N) Σ + (tr Σ / N) I)⁻¹``, OLS, ridge and the
zero predictor.

Per trained model (the ``--json`` objects): ``test_loss`` / ``reference_loss`` on the same
evaluation tasks; ``cos_sensitivity``, ``model_diff``, ``pred_diff`` against the reference
(:mod:`attnreg.studies.icl.metrics`); ``learned_eta`` ``= tr Γ / d`` of one-layer LSA models,
``Γ`` their heads' summed :meth:`~attnreg.models.TrainableLSA.step_matrix` (``None``
otherwise), and the reference's ``reference_eta``; ``plateau``: ``None`` if training showed no
loss plateau, else a sentence saying where and whether the run
escaped it or ended stuck on it (:func:`attnreg.plateaus.find_plateaus`). Also in the rows
(not the ``--json`` view), for the claims (:mod:`attnreg.studies.icl.claims`): ``loss_gap``,
``loss_gap_se`` — the model's per-task loss minus the reference's, mean and standard error
paired over the evaluation tasks; ``eta_gap``, ``eta_gap_se`` — the same for GD with the learned
η against GD with the reference η; ``cos_null`` — OLS's sensitivity cosine with GD's on the same
tasks (models whose reference is GD; NaN otherwise).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Any

import torch

from attnreg.constructions import OLSTransformer
from attnreg.core.threads import torch_threads
from attnreg.data.tasks import Tasks, TaskSampler, eval_loss
from attnreg.estimators import GD, OLS
from attnreg.explaining import explain
from attnreg.models import TokenModel, TrainableLSA
from attnreg.progress import Progress
from attnreg.studies.common import Section, StudyResult
from attnreg.studies.icl.claims import icl_claims
from attnreg.studies.icl.config import MODEL_SPECS, ICLConfig, ModelSpec
from attnreg.studies.icl.metrics import alignment, task_losses
from attnreg.studies.icl.references import (
    Reference,
    fit_references,
    references_for,
)
from attnreg.studies.icl.sweeps import context_sweep, ood_sweep
from attnreg.studies.icl.train import (
    build_model,
    interpolation_loss,
    make_sampler,
    model_fn,
    preconditioner_cosine,
    train_model,
)
from attnreg.studies.paired import paired_difference
from attnreg.thresholds import check
from attnreg.training import TrainResult, generator

JSON_KEYS = (
    "model",
    "layers",
    "heads",
    "test_loss",
    "reference",
    "reference_loss",
    "cos_sensitivity",
    "pred_diff",
    "model_diff",
    "learned_eta",
    "reference_eta",
    "plateau",
)


# ---------------------------------------------------------------------------------------------
# the study


def run(cfg: ICLConfig | None = None, progress: Progress | None = None) -> StudyResult:
    """Train every model of ``cfg.models``, fit the references, measure alignment, the loss
    against the number of context examples and the out-of-distribution losses; return the
    rows, figures, trained models (as checkpoints to write), summary and checks (thresholds:
    ``cfg.max_loss_ratio`` … ``cfg.max_eta_error``). Writes nothing; ``progress`` shows a stage
    per trained model."""
    cfg = cfg or ICLConfig()
    with torch_threads(cfg.threads):
        return _run(cfg, progress or Progress.quiet())


@dataclass
class Trained:
    """What the later sections read from the trained one: the models' specs, the task samplers
    and fitted references per task kind, and the trained models."""

    specs: dict[str, ModelSpec]
    samplers: dict[str, TaskSampler]
    refs: dict[str, dict[str, Reference]]
    models: dict[str, TokenModel]


def _run(cfg: ICLConfig, progress: Progress) -> StudyResult:
    t_start = time.perf_counter()
    result = StudyResult("icl", asdict(cfg), [])
    section, trained = trained_section(cfg, progress)
    result.add(section)
    result.add(sweep_section(cfg, trained))
    result.add(explain_section(cfg, trained))
    result.summary["wall time"] = f"{time.perf_counter() - t_start:.1f} s ({cfg.threads} thread(s))"
    return result


def trained_section(cfg: ICLConfig, progress: Progress) -> tuple[Section, Trained]:
    """Every model of ``cfg.models`` trained and set against its reference fitted on separate
    tasks: rows ``"reference"`` and ``"model"``, the headline sentences and checks, the
    training, alignment and weight figures, the claims and the models as checkpoints."""
    from attnreg.studies.icl.figures import trained_figures  # matplotlib: only when run

    specs = {name: MODEL_SPECS[name] for name in cfg.models}
    rows: list[dict[str, Any]] = []
    samplers: dict[str, TaskSampler] = {}
    tests: dict[str, Tasks] = {}
    refs: dict[str, dict[str, Reference]] = {}
    for kind in sorted({s.tasks for s in specs.values()}):
        sampler = make_sampler(cfg, kind)
        samplers[kind] = sampler
        test = sampler.sample(cfg.eval_tasks, generator(10**6 + cfg.seed), torch.float64)
        fit = sampler.sample(cfg.fit_tasks, generator(2 * 10**6 + cfg.seed), torch.float64)
        tests[kind] = test
        kind_specs = [s for s in specs.values() if s.tasks == kind]
        refs[kind] = fit_references(sampler, fit, test, references_for(kind, kind_specs))
        for ref in refs[kind].values():
            rows.append(
                {
                    "kind": "reference",
                    "tasks": kind,
                    "model": ref.name,
                    "test_loss": ref.loss,
                    "eta": ref.eta,
                    "seed": cfg.seed,
                    **{k: v for k, v in ref.params.items() if isinstance(v, float)},
                }
            )

    models: dict[str, TokenModel] = {}
    results: dict[str, TrainResult] = {}
    histories: dict[str, list[dict[str, float]]] = {}
    checkpoints: dict[str, tuple[TokenModel, dict[str, Any]]] = {}
    cos_nulls: dict[int, float] = {}
    for i, (name, spec) in enumerate(specs.items()):
        seed = cfg.seed * 1000 + i
        ref = refs[spec.tasks][spec.reference]
        model = build_model(spec, cfg, seed)
        history: list[dict[str, float]] = []
        steps = cfg.deep_steps if spec.long else cfg.steps
        res = train_model(
            model,
            samplers[spec.tasks],
            tests[spec.tasks],
            cfg,
            steps,
            seed,
            ref,
            name=name,
            history=history,
            plateau_reference=ref.loss if spec.kind == "lsa" else None,
            progress=progress,
        )
        models[name], results[name], histories[name] = model, res, history
        test = tests[spec.tasks]
        metrics = alignment(
            model_fn(model), ref.predictor.predict, test.x_ctx, test.y_ctx, test.x_query
        )
        test_loss = eval_loss(model_fn(model), test)
        tensors = (test.x_ctx, test.y_ctx, test.x_query, test.y_query)
        ref_losses = task_losses(ref.predictor.predict, *tensors)
        loss_gap, loss_gap_se = paired_difference(
            task_losses(model_fn(model), *tensors), ref_losses
        )
        learned = (
            model.learned_eta()
            if isinstance(model, TrainableLSA) and spec.layers == 1 and spec.tasks == "uniform"
            else None
        )
        eta_gap, eta_gap_se = (
            paired_difference(task_losses(GD(learned, 1).predict, *tensors), ref_losses)
            if learned is not None and ref.eta is not None
            else (math.nan, math.nan)
        )
        cos_null = (
            _cos_null(test, ref.predictor.predict, cos_nulls)
            if spec.reference == "GD"
            else math.nan
        )
        interp = (
            interpolation_loss(model, ref.eta, test)
            if isinstance(model, TrainableLSA) and ref.eta is not None and spec.reference == "GD"
            else None
        )
        row = {
            "model": name,
            "layers": spec.layers,
            "heads": spec.heads,
            "test_loss": test_loss,
            "reference": ref.name,
            "reference_loss": ref.loss,
            **metrics,
            "learned_eta": learned,
            "reference_eta": ref.eta,
            "plateau": res.plateau_summary(),
            "kind": "model",
            "tasks": spec.tasks,
            "recurrent": spec.recurrent,
            "variant": getattr(model, "variant", "softmax"),
            "seed": seed,
            "steps_run": res.steps_run,
            "train_seconds": res.seconds,
            "train_cpu_seconds": res.cpu_seconds,
            "loss_ratio": test_loss / ref.loss,
            "loss_gap": loss_gap,
            "loss_gap_se": loss_gap_se,
            "eta_gap": eta_gap,
            "eta_gap_se": eta_gap_se,
            "cos_null": cos_null,
            "interpolation_loss": interp,
            "preconditioner_cosine": (
                preconditioner_cosine(model, samplers[spec.tasks])
                if isinstance(model, TrainableLSA) and spec.tasks == "gaussian"
                else None
            ),
        }
        rows.append(row)
        checkpoints[name] = (
            model,
            {
                "study": "icl",
                "name": name,
                "tasks": spec.tasks,
                "n_ctx": cfg.n_ctx,
                "reference": ref.name,
                "test_loss": test_loss,
                "covariance": (
                    samplers[spec.tasks].input_covariance.tolist()
                    if spec.tasks == "gaussian"
                    else None
                ),
            },
        )
    summary: dict[str, str] = {}
    checks = _headline(cfg, rows, refs, summary)
    section = Section(
        rows,
        summary,
        checks,
        trained_figures(cfg, models, results, histories, refs),
        claims=icl_claims(rows, cfg),
        models=checkpoints,
    )
    return section, Trained(specs, samplers, refs, models)


def sweep_section(cfg: ICLConfig, trained: Trained) -> Section:
    """The trained models and their references under noisy labels: the loss against the
    number of context examples (Garg et al. 2022) and under shifted inputs or teachers (rows
    ``"context_sweep"`` and ``"ood"``, and their figures)."""
    from attnreg.studies.icl.figures import sweep_figures  # matplotlib: only when run

    rows = context_sweep(cfg, trained.models, trained.specs, trained.refs)
    rows += ood_sweep(cfg, trained.models, trained.specs, trained.refs)
    return Section(rows, figures=sweep_figures(cfg, rows))


def explain_section(cfg: ICLConfig, trained: Trained) -> Section:
    """:func:`~attnreg.explaining.explain` on the trained one-layer LSA and on the
    OLS-Transformer (rows ``"explain"`` and a sentence each; nothing without ``lsa-1``)."""
    models, samplers = trained.models, trained.samplers
    rows: list[dict[str, Any]] = []
    summary: dict[str, str] = {}
    if "lsa-1" in models:
        held = samplers["uniform"].sample(
            cfg.explain_tasks, generator(3 * 10**6 + cfg.seed), torch.float64
        )
        for label, predictor in (("lsa-1", models["lsa-1"]), ("OLS-Transformer", OLSTransformer())):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ex = explain(predictor, held)
            for r in ex.rows():
                rows.append({"kind": "explain", "model": label, **r})
            if ex.best is None:
                summary[f"explain {label}"] = ex.verdict()
                continue
            best = ex.fit(ex.best)
            summary[f"explain {label}"] = (
                f"best family {ex.best} ({_short(best.params) or 'no parameter'}; R² held out "
                f"{best.r2:.5f}, cosine {best.cosine:.5f}; other families "
                + ", ".join(f"{f.family} {f.r2:.5f}" for f in ex.fits if f.family != ex.best)
                + ")"
            )
    return Section(rows, summary)


def _cos_null(test: Tasks, gd: Any, cache: dict[int, float]) -> float:
    """The null for the sensitivity cosine, once per test set: OLS's cosine with GD's on the
    same tasks (the exact least-squares solver, the other algorithm a trained layer could
    implement)."""
    key = id(test)
    if key not in cache:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cache[key] = alignment(OLS().predict, gd, test.x_ctx, test.y_ctx, test.x_query)[
                "cos_sensitivity"
            ]
    return cache[key]


def _short(params: dict[str, Any]) -> str:
    return ", ".join(f"{k} = {v:.4g}" for k, v in params.items() if isinstance(v, float))


def _headline(
    cfg: ICLConfig,
    rows: list[dict[str, Any]],
    refs: dict[str, dict[str, Reference]],
    summary: dict[str, str],
) -> list[dict[str, Any]]:
    """The headline measurements as sentences with numbers (into ``summary``) and as checks
    against the config's thresholds (returned)."""
    by_name = {r["model"]: r for r in rows if r.get("kind") == "model"}
    checks: list[dict[str, Any]] = []

    def verdict(*new: dict[str, Any]) -> str:
        checks.extend(new)
        return "PASS" if all(c["passed"] for c in new) else "FAIL"

    for name, title in (("lsa-1", "1-layer LSA"), ("lsa-1-2heads", "1-layer 2-head LSA")):
        if name not in by_name:
            continue
        r = by_name[name]
        eta_err = abs(r["learned_eta"] - r["reference_eta"]) / r["reference_eta"]
        ok = verdict(
            check(f"{name} loss / line-searched GD's", r["loss_ratio"], "<=", cfg.max_loss_ratio),
            check(
                f"{name} sensitivity cosine with GD",
                r["cos_sensitivity"],
                ">=",
                cfg.min_sensitivity_cosine,
            ),
            check(f"{name} learned η relative error", eta_err, "<=", cfg.max_eta_error),
        )
        interp = r["interpolation_loss"]
        interp_text = "" if interp is None else f"; interpolation (θ_TF + θ_GD)/2 loss {interp:.5f}"
        summed = f" ({r['heads']} heads summed)" if r["heads"] > 1 else ""
        summary[f"{title} vs line-searched GD"] = (
            f"{ok}: test loss {r['test_loss']:.5f} vs GD {r['reference_loss']:.5f} on "
            f"the same {cfg.eval_tasks} tasks (ratio {r['loss_ratio']:.4f}, target ≤ "
            f"{cfg.max_loss_ratio:g}); sensitivity cosine {r['cos_sensitivity']:.5f} (≥ "
            f"{cfg.min_sensitivity_cosine:g}); learned η {r['learned_eta']:.4f}{summed} vs "
            f"line-searched η {r['reference_eta']:.4f} ({eta_err:.2%}, ≤ "
            f"{cfg.max_eta_error:.0%}){interp_text}"
        )
    if "softmax-2heads" in by_name:
        r = by_name["softmax-2heads"]
        summary["1-layer 2-head softmax attention vs line-searched GD"] = (
            f"test loss {r['test_loss']:.5f} vs GD {r['reference_loss']:.5f} (ratio "
            f"{r['loss_ratio']:.4f}); sensitivity cosine {r['cos_sensitivity']:.5f}; no check: "
            "softmax-normalised weights make it a kernel smoother, not a GD step"
        )
    for name in ("lsa-2-recurrent-gdpp", "lsa-3-recurrent-gdpp"):
        if name in by_name:
            r = by_name[name]
            ok = verdict(
                check(
                    f"{name} loss / fitted GD++'s", r["loss_ratio"], "<=", cfg.max_loss_ratio_gdpp
                )
            )
            summary[f"{name} vs fitted GD++"] = (
                f"{ok}: test loss {r['test_loss']:.5f} vs "
                f"{r['reference']} {r['reference_loss']:.5f} (ratio {r['loss_ratio']:.4f}, "
                f"target ≤ {cfg.max_loss_ratio_gdpp:g}); sensitivity cosine "
                f"{r['cos_sensitivity']:.4f}"
            )
    if "lsa-1-gaussian" in by_name:
        r = by_name["lsa-1-gaussian"]
        fitted = refs["gaussian"].get("preconditioned GD (fitted)")
        gd = refs["gaussian"]["GD"]
        ok = verdict(
            check(
                "lsa-1-gaussian loss / optimal preconditioned GD's",
                r["loss_ratio"],
                "<=",
                cfg.max_loss_ratio,
            )
        )
        summary["Gaussian inputs: full-KQ LSA vs optimal preconditioned GD"] = (
            f"{ok}: test loss {r['test_loss']:.5f} vs optimal "
            f"Γ* {r['reference_loss']:.5f} (ratio {r['loss_ratio']:.4f}, target ≤ "
            f"{cfg.max_loss_ratio:g}); fitted Γ {fitted.loss if fitted else math.nan:.5f}; plain "
            f"GD {gd.loss:.5f}; cosine(learned Γ, Γ*) "
            f"{r['preconditioner_cosine']:.4f} (condition number of Σ: {cfg.gaussian_condition:g})"
        )
    for name, r in by_name.items():
        if r["plateau"] and "stuck" in r["plateau"]:
            summary[f"{name} plateau"] = r["plateau"]
    return checks


def json_rows(result: StudyResult) -> list[dict[str, Any]]:
    """The ``--json`` view: one object per trained model with exactly :data:`JSON_KEYS`."""
    return [{k: r.get(k) for k in JSON_KEYS} for r in result.rows if r.get("kind") == "model"]
