"""``icl`` — trained linear transformers learn gradient descent.

von Oswald et al. (2023), "Transformers learn in-context by gradient descent"; Ahn et al.
(2023) for Gaussian inputs and preconditioning; Garg et al. (2022) for the loss against the
number of context examples; Akyürek et al. (2023) for comparing trained models with GD / ridge
/ OLS on the same tasks.

Setup (their code's convention): ``d = N = 10``, ``x ~ U(−0.5, 0.5)``, ``w ~ N(0, I)``,
``y = wᵀx``, loss ``0.5 × MSE`` on the query, evaluation on 10,000 tasks. Models are trained
online (a fresh batch of 2048 tasks per Adam step) by :func:`attnreg.training.train`.

References are fitted on a separate set of ``fit_tasks`` tasks and evaluated on the same
evaluation tasks as the models: GD with the line-searched η (exact: the one-step prediction is
linear in η), K-step GD, GD++ with fitted ``(η, γ)``, preconditioned GD with the fitted and
(Gaussian inputs) the optimal ``Γ* = ((1 + 1/N) Σ + (tr Σ / N) I)⁻¹``, OLS, ridge and the
zero predictor.

Per trained model (the ``--json`` objects): ``test_loss`` / ``reference_loss`` on the same
evaluation tasks; ``cos_sensitivity``, ``model_diff``, ``pred_diff`` against the reference
(:mod:`attnreg.studies.icl_metrics`); ``learned_eta`` read from the scale-normalised weights of
one-layer LSA models (``None`` otherwise) and the reference's ``reference_eta``; ``plateau``:
``None`` if training showed no loss plateau, else a sentence saying where and whether the run
escaped it or ended stuck on it (:func:`attnreg.training.find_plateaus`).
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from attnreg.constructions import OLSTransformer
from attnreg.core.validation import check_choice, check_positive_int
from attnreg.core.whitening import ConditioningWarning, RankWarning
from attnreg.data.tasks import Tasks, TaskSampler, query_loss, random_covariance
from attnreg.estimators import GD, OLS, PreconditionedGD, Predictor, Ridge, optimal_preconditioner
from attnreg.models import SoftmaxAttention, TokenModel, TrainableLSA, gd_products, save_model
from attnreg.studies.common import StudyResult
from attnreg.studies.explain import explain, fit_family
from attnreg.studies.icl_metrics import alignment
from attnreg.training import TrainConfig, TrainResult, generator, train

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


@dataclass(frozen=True)
class ModelSpec:
    """A trained model of the study: architecture, task distribution and its reference."""

    kind: str  # "lsa" | "softmax"
    layers: int = 1
    heads: int = 1
    recurrent: bool = False
    variant: str = "full"
    tasks: str = "uniform"  # "uniform" (von Oswald) | "gaussian" (Ahn et al.)
    reference: str = "GD"
    long: bool = False  # trained for ``deep_steps``


MODEL_SPECS: dict[str, ModelSpec] = {
    "lsa-1": ModelSpec("lsa"),
    "lsa-1-2heads": ModelSpec("lsa", heads=2),
    "lsa-1-factored": ModelSpec("lsa", variant="factored"),
    "lsa-2-recurrent-gdpp": ModelSpec(
        "lsa", layers=2, recurrent=True, variant="gdpp", reference="GD++ x2", long=True
    ),
    "lsa-2-deep": ModelSpec("lsa", layers=2, reference="GD++ x2", long=True),
    "lsa-2-deep-gdpp": ModelSpec("lsa", layers=2, variant="gdpp", reference="GD++ x2", long=True),
    "lsa-3-recurrent-gdpp": ModelSpec(
        "lsa", layers=3, recurrent=True, variant="gdpp", reference="GD++ x3", long=True
    ),
    "lsa-1-gaussian": ModelSpec("lsa", tasks="gaussian", reference="preconditioned GD (optimal)"),
    "softmax-2heads": ModelSpec("softmax", heads=2),
}


@dataclass
class ICLConfig:
    """``attnreg icl`` settings (every field has a default: the quick profile)."""

    seed: int = 0
    d: int = 10
    n_ctx: int = 10
    eval_tasks: int = 10000
    fit_tasks: int = 10000
    batch: int = 2048
    lr: float = 1e-2
    schedule: str = "cosine"
    clip: float = 10.0
    init_scale: float = 0.05
    steps: int = 1500
    deep_steps: int = 3000
    eval_every: int = 100
    models: list[str] = field(
        default_factory=lambda: [
            "lsa-1",
            "lsa-1-2heads",
            "lsa-2-recurrent-gdpp",
            "lsa-1-gaussian",
            "softmax-2heads",
        ]
    )
    gaussian_condition: float = 10.0
    sweep_noise: float = 0.25
    sweep_tasks: int = 2000
    input_scales: list[float] = field(default_factory=lambda: [0.5, 1.0, 1.5, 2.0])
    teacher_scales: list[float] = field(default_factory=lambda: [0.5, 1.0, 2.0, 5.0])
    alignment_tasks: int = 1000
    explain_tasks: int = 2000
    threads: int = 1
    device: str = "cpu"
    progress: bool = False

    def __post_init__(self) -> None:
        for name in (
            "d",
            "n_ctx",
            "eval_tasks",
            "fit_tasks",
            "batch",
            "steps",
            "deep_steps",
            "threads",
            "sweep_tasks",
            "alignment_tasks",
            "explain_tasks",
        ):
            check_positive_int(name, getattr(self, name))
        for name in self.models:
            check_choice("models", name, MODEL_SPECS)


def quick_config(**changes: Any) -> ICLConfig:
    """The quick profile (a few minutes on 2 cores)."""
    return ICLConfig(**changes)


def full_config(**changes: Any) -> ICLConfig:
    """The full profile: every model, longer training, more evaluation tasks for the sweeps."""
    base: dict[str, Any] = {
        "steps": 5000,
        "deep_steps": 10000,
        "lr": 3e-3,
        "models": list(MODEL_SPECS),
        "sweep_tasks": 10000,
        "input_scales": [0.5, 0.75, 1.0, 1.25, 1.5, 2.0],
        "teacher_scales": [0.5, 1.0, 2.0, 3.0, 5.0],
    }
    base.update(changes)
    return ICLConfig(**base)


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run with ``n`` intra-op threads, restoring the previous setting afterwards."""
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


# ---------------------------------------------------------------------------------------------
# references


@dataclass
class Reference:
    """A fitted reference estimator and its loss on the evaluation tasks."""

    name: str
    predictor: Predictor
    loss: float
    eta: float | None = None
    params: dict[str, Any] = field(default_factory=dict)


class ZeroPredictor:
    """Predicts 0 for every query (the loss every model starts from)."""

    def predict(self, x_ctx: Any, y_ctx: Any, x_query: Any) -> torch.Tensor:
        xq = torch.as_tensor(x_query)
        y = torch.as_tensor(y_ctx)
        return xq.new_zeros(*xq.shape[:-1], y.shape[-1])


def eval_loss(predictor: Predictor | Callable[..., torch.Tensor], tasks: Tasks) -> float:
    """``0.5 × MSE`` of ``predictor`` on the tasks' queries (float64 inputs)."""
    predict = predictor.predict if hasattr(predictor, "predict") else predictor
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankWarning)
        warnings.simplefilter("ignore", ConditioningWarning)
        with torch.no_grad():
            out = predict(tasks.x_ctx, tasks.y_ctx, tasks.x_query)
    return float(query_loss(out.to(torch.float64).reshape(tasks.y_query.shape), tasks.y_query))


def line_search_eta(tasks: Tasks) -> float:
    """The one-step GD η minimising the query loss on ``tasks``: with ``g = (1/N) x_qᵀ XᵀY``
    the prediction is ``η g``, so the line search is exact, ``η* = ⟨g, y_q⟩ / ⟨g, g⟩``."""
    g = GD(1.0, 1).predict(tasks.x_ctx, tasks.y_ctx, tasks.x_query)
    return float((g * tasks.y_query).sum() / (g * g).sum())


def fit_references(
    sampler: TaskSampler, fit: Tasks, test: Tasks, names: list[str]
) -> dict[str, Reference]:
    """Fit every named reference on ``fit`` (float64) and evaluate it on ``test``."""
    refs: dict[str, Reference] = {}
    args = (fit.x_ctx, fit.y_ctx, fit.x_query, fit.y_query)
    for name in names:
        if name == "GD":
            eta = line_search_eta(fit)
            pred: Predictor = GD(eta, 1)
            refs[name] = Reference(name, pred, eval_loss(pred, test), eta, {"eta": eta})
        elif name.startswith("GD x"):
            k = int(name.split("x")[1])
            f = fit_family("GD", *args, steps=k)
            assert f.predictor is not None
            refs[name] = Reference(
                name, f.predictor, eval_loss(f.predictor, test), f.params["eta"], f.params
            )
        elif name.startswith("GD++ x"):
            k = int(name.split("x")[1])
            f = fit_family("GD++", *args, steps=k)
            assert f.predictor is not None
            refs[name] = Reference(
                name, f.predictor, eval_loss(f.predictor, test), f.params["eta"], f.params
            )
        elif name == "preconditioned GD (fitted)":
            f = fit_family("preconditioned GD", *args, steps=1)
            assert f.predictor is not None
            refs[name] = Reference(name, f.predictor, eval_loss(f.predictor, test), 1.0)
        elif name == "preconditioned GD (optimal)":
            gamma = optimal_preconditioner(sampler.input_covariance, sampler.n_ctx)
            pred = PreconditionedGD(gamma, 1.0, 1)
            refs[name] = Reference(name, pred, eval_loss(pred, test), 1.0)
        elif name == "OLS":
            refs[name] = Reference(name, OLS(), eval_loss(OLS(), test))
        elif name == "ridge":
            lam = max(sampler.noise_std**2, 1e-3)
            refs[name] = Reference(
                name, Ridge(lam), eval_loss(Ridge(lam), test), None, {"lam": lam}
            )
        elif name == "zero":
            refs[name] = Reference(name, ZeroPredictor(), eval_loss(ZeroPredictor(), test))
        else:  # pragma: no cover - names are internal
            raise ValueError(f"reference: unknown name {name!r}")
    return refs


# ---------------------------------------------------------------------------------------------
# models


def make_sampler(cfg: ICLConfig, kind: str) -> TaskSampler:
    """The von Oswald sampler (``"uniform"``) or Gaussian inputs with a random covariance of
    condition number ``gaussian_condition`` (``"gaussian"``, Ahn et al. 2023)."""
    if kind == "uniform":
        return TaskSampler(d=cfg.d, n_ctx=cfg.n_ctx)
    cov = random_covariance(cfg.d, cfg.gaussian_condition, seed=cfg.seed)
    cov = cov / 12  # same trace as U(−0.5, 0.5): tr Σ = d/12
    return TaskSampler(d=cfg.d, n_ctx=cfg.n_ctx, inputs="gaussian", covariance=cov)


def build_model(spec: ModelSpec, cfg: ICLConfig, seed: int) -> TokenModel:
    """A fresh model for ``spec`` with a small seeded initialisation."""
    if spec.kind == "softmax":
        return SoftmaxAttention(
            cfg.d, 1, spec.layers, spec.heads, spec.recurrent, cfg.init_scale, seed
        )
    return TrainableLSA(
        cfg.d, 1, spec.layers, spec.heads, spec.recurrent, spec.variant, cfg.init_scale, seed
    )


def train_model(
    model: TokenModel,
    sampler: TaskSampler,
    test: Tasks,
    cfg: ICLConfig,
    steps: int,
    seed: int,
    reference: Reference | None = None,
    stop_below: float | None = None,
    eval_every: int | None = None,
    name: str = "train",
    history: list[dict[str, float]] | None = None,
    plateau_reference: float | None = None,
) -> TrainResult:
    """Adam on fresh batches of ``cfg.batch`` tasks from ``sampler`` (float32), evaluated on
    ``test`` every ``eval_every`` steps; alignment with ``reference`` is appended to
    ``history`` at each evaluation when a list is given."""
    device = torch.device(cfg.device)
    model.to(device)
    gen = generator(seed)
    test32 = test.to(device=device, dtype=torch.float32)
    n_align = min(cfg.alignment_tasks, len(test))
    align = test.subset(slice(0, n_align))

    def loss_fn(step: int) -> torch.Tensor:
        t = sampler.sample(cfg.batch, gen, torch.float32, device)
        return query_loss(model.forward_predict(t.x_ctx, t.y_ctx, t.x_query), t.y_query)

    def eval_fn() -> float:
        loss = float(
            query_loss(
                model.forward_predict(test32.x_ctx, test32.y_ctx, test32.x_query), test32.y_query
            )
        )
        if history is not None and reference is not None:
            metrics = alignment(
                _model_fn(model),
                reference.predictor.predict,
                align.x_ctx,
                align.y_ctx,
                align.x_query,
            )
            history.append({"step": float(len(losses_seen)), "test_loss": loss, **metrics})
        return loss

    losses_seen: list[int] = []

    def counted_loss(step: int) -> torch.Tensor:
        losses_seen.append(step)
        return loss_fn(step)

    tc = TrainConfig(
        steps=steps,
        lr=cfg.lr,
        schedule=cfg.schedule if stop_below is None else "constant",
        clip=cfg.clip,
        seed=seed,
        eval_every=eval_every or cfg.eval_every,
        stop_below=stop_below,
        reference_loss=plateau_reference,
        plateau_window=max(50, steps // 20),
    )
    return train(model, counted_loss, tc, eval_fn, progress=cfg.progress, description=name)


def _model_fn(model: TokenModel) -> Callable[..., torch.Tensor]:
    """The model as a differentiable float64 function of (x_ctx, y_ctx, x_query)."""

    def fn(xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
        dev = next(model.parameters()).device
        return model.forward_predict(xc.to(dev), yc.to(dev), xq.to(dev)).to(xq.device)

    return fn


# ---------------------------------------------------------------------------------------------
# P4: the benchmark workload


def train_one_layer_to_gd(
    seed: int = 0,
    target: float = 1.02,
    lr: float = 3e-2,
    batch: int = 2048,
    eval_tasks: int = 10000,
    max_steps: int = 3000,
    eval_every: int = 10,
    threads: int | None = 1,
) -> dict[str, Any]:
    """Performance target P4 (``quality.md``), end to end: sample 10,000 evaluation tasks of the
    von Oswald setup, line-search the one-step-GD η (exactly, on 10,000 separate tasks), and
    train a one-layer LSA (identifiable products ``KQ``, ``PV``; Adam lr 3e-2, batch 2048,
    float32) until its evaluation loss is within ``target ×`` the GD loss on the same tasks.

    Returns wall and CPU seconds (the whole workload), steps, both losses, both η's. With
    ``threads`` the intra-op thread count is set for the call (1 by default: each step is a few
    small GEMMs, and a second thread costs more than it saves, especially on a shared machine).
    """
    check_positive_int("max_steps", max_steps)
    ctx = torch_threads(threads) if threads else contextlib.nullcontext()
    with ctx:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        sampler = TaskSampler()
        test = sampler.sample(eval_tasks, generator(10**6 + seed), torch.float32)
        fit = sampler.sample(eval_tasks, generator(2 * 10**6 + seed), torch.float32)
        eta = line_search_eta(fit)
        gd_loss = eval_loss(GD(eta, 1), test)
        model = TrainableLSA(sampler.d, init_scale=0.05, seed=seed)
        gen = generator(seed)

        def loss_fn(step: int) -> torch.Tensor:
            t = sampler.sample(batch, gen, torch.float32)
            return query_loss(model.forward_predict(t.x_ctx, t.y_ctx, t.x_query), t.y_query)

        def eval_fn() -> float:
            out = model.forward_predict(test.x_ctx, test.y_ctx, test.x_query)
            return float(query_loss(out, test.y_query))

        cfg = TrainConfig(
            steps=max_steps,
            lr=lr,
            clip=None,
            seed=seed,
            eval_every=eval_every,
            stop_below=target * gd_loss,
            plateau_window=50,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = train(model, loss_fn, cfg, eval_fn, progress=False, description="P4")
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    final = result.evals[-1][1]
    return {
        "seed": seed,
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "steps": result.steps_run,
        "reached": result.stopped == "stop_below",
        "test_loss": final,
        "gd_loss": gd_loss,
        "ratio": final / gd_loss,
        "learned_eta": model.learned_eta(),
        "gd_eta": eta,
        "threads": torch.get_num_threads() if not threads else threads,
    }


# ---------------------------------------------------------------------------------------------
# the study


def _references_for(spec_tasks: str, specs: list[ModelSpec]) -> list[str]:
    names = ["GD", "OLS", "ridge", "zero"]
    for spec in specs:
        if spec.reference not in names:
            names.append(spec.reference)
        if spec.layers > 1:
            for extra in (f"GD x{spec.layers}", f"GD++ x{spec.layers}"):
                if extra not in names:
                    names.append(extra)
    if spec_tasks == "gaussian":
        names += [
            n
            for n in ("preconditioned GD (fitted)", "preconditioned GD (optimal)")
            if n not in names
        ]
    return names


def _interpolation_loss(model: TrainableLSA, eta: float, test: Tasks) -> float | None:
    """Loss of ``θ = (θ_TF + θ_GD)/2`` after scale normalisation (one-layer, one-head models)."""
    if model.n_layers != 1 or model.heads != 1:
        return None
    kq, pv = model.normalised_products()
    kq_gd, pv_gd = gd_products(model.d, model.dy, eta, kq.dtype)
    mid = TrainableLSA.from_products((kq[0] + kq_gd) / 2, (pv[0] + pv_gd) / 2, dy=model.dy)
    return eval_loss(mid, test)


def run(cfg: ICLConfig | None = None, out_dir: str | Path | None = None) -> StudyResult:
    """Train every model of ``cfg.models``, fit the references, measure alignment, the loss
    against the number of context examples and the out-of-distribution losses; save
    checkpoints and figures under ``out_dir`` (if given). Returns the :class:`StudyResult`."""
    cfg = cfg or ICLConfig()
    out = Path(out_dir) if out_dir is not None else None
    with torch_threads(cfg.threads):
        return _run(cfg, out)


def _run(cfg: ICLConfig, out: Path | None) -> StudyResult:
    from attnreg.studies import icl_figures

    t_start = time.perf_counter()
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
        refs[kind] = fit_references(sampler, fit, test, _references_for(kind, kind_specs))
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
    summary: dict[str, str] = {}
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
        )
        models[name], results[name], histories[name] = model, res, history
        test = tests[spec.tasks]
        metrics = alignment(
            _model_fn(model), ref.predictor.predict, test.x_ctx, test.y_ctx, test.x_query
        )
        test_loss = eval_loss(_model_fn(model), test)
        learned = (
            model.learned_eta()
            if isinstance(model, TrainableLSA) and spec.layers == 1 and spec.tasks == "uniform"
            else None
        )
        interp = (
            _interpolation_loss(model, ref.eta, test)
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
            "interpolation_loss": interp,
            "preconditioner_cosine": (
                _preconditioner_cosine(model, samplers[spec.tasks])
                if isinstance(model, TrainableLSA) and spec.tasks == "gaussian"
                else None
            ),
        }
        rows.append(row)
        if out is not None:
            save_model(
                out / "checkpoints" / f"{name}.pt",
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
    _headline(cfg, rows, refs, summary)

    # loss against the number of context examples (Garg et al. 2022), noisy labels
    sweep_rows = _context_sweep(cfg, models, specs, refs)
    rows += sweep_rows
    ood_rows = _ood(cfg, models, specs, refs)
    rows += ood_rows

    # explain: a trained one-layer LSA and the OLS-Transformer
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
            best = ex.fit(ex.best)
            summary[f"explain {label}"] = (
                f"best family {ex.best} ({_short(best.params) or 'no parameter'}; R² held out "
                f"{best.r2:.5f}, cosine {best.cosine:.5f}; other families "
                + ", ".join(f"{f.family} {f.r2:.5f}" for f in ex.fits if f.family != ex.best)
                + ")"
            )
    figures = []
    if out is not None:
        figures = icl_figures.make_figures(cfg, out, rows, models, results, histories, refs)
    summary["wall time"] = f"{time.perf_counter() - t_start:.1f} s ({cfg.threads} thread(s))"
    return StudyResult("icl", config_dict(cfg), rows, figures, summary)


def _preconditioner_cosine(model: TrainableLSA, sampler: TaskSampler) -> float:
    """Cosine between the preconditioner a one-layer LSA applies, ``−Σ_h PV_h[y,y] KQ_h[x,x]``,
    and the optimal ``Γ*`` of Ahn et al. (2023), both flattened (1 = the same up to scale)."""
    d = model.d
    kq, pv = model.key_query(0).detach().double(), model.value_projection(0).detach().double()
    learned = -(pv[:, d:, d:].mean((-2, -1)).view(-1, 1, 1) * kq[:, :d, :d]).sum(0)
    optimal = optimal_preconditioner(sampler.input_covariance, sampler.n_ctx)
    return float(
        torch.nn.functional.cosine_similarity(learned.reshape(1, -1), optimal.reshape(1, -1))
    )


def _short(params: dict[str, Any]) -> str:
    return ", ".join(f"{k} = {v:.4g}" for k, v in params.items() if isinstance(v, float))


def _headline(
    cfg: ICLConfig,
    rows: list[dict[str, Any]],
    refs: dict[str, dict[str, Reference]],
    summary: dict[str, str],
) -> None:
    """The Done-when measurements as sentences with numbers and a verdict."""
    by_name = {r["model"]: r for r in rows if r.get("kind") == "model"}

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "FAIL"

    if "lsa-1" in by_name:
        r = by_name["lsa-1"]
        eta_err = abs(r["learned_eta"] - r["reference_eta"]) / r["reference_eta"]
        ok = r["loss_ratio"] <= 1.02 and r["cos_sensitivity"] >= 0.99 and eta_err <= 0.05
        interp = r["interpolation_loss"]
        interp_text = "" if interp is None else f"; interpolation (θ_TF + θ_GD)/2 loss {interp:.5f}"
        summary["1-layer LSA vs line-searched GD"] = (
            f"{verdict(ok)}: test loss {r['test_loss']:.5f} vs GD {r['reference_loss']:.5f} on "
            f"the same {cfg.eval_tasks} tasks (ratio {r['loss_ratio']:.4f}, target ≤ 1.02); "
            f"sensitivity cosine {r['cos_sensitivity']:.5f} (≥ 0.99); learned η "
            f"{r['learned_eta']:.4f} vs line-searched η {r['reference_eta']:.4f} "
            f"({eta_err:.2%}, ≤ 5 %){interp_text}"
        )
    for name in ("lsa-2-recurrent-gdpp", "lsa-3-recurrent-gdpp"):
        if name in by_name:
            r = by_name[name]
            summary[f"{name} vs fitted GD++"] = (
                f"{verdict(r['loss_ratio'] <= 1.05)}: test loss {r['test_loss']:.5f} vs "
                f"{r['reference']} {r['reference_loss']:.5f} (ratio {r['loss_ratio']:.4f}, "
                f"target ≤ 1.05); sensitivity cosine {r['cos_sensitivity']:.4f}"
            )
    if "lsa-1-gaussian" in by_name:
        r = by_name["lsa-1-gaussian"]
        fitted = refs["gaussian"].get("preconditioned GD (fitted)")
        gd = refs["gaussian"]["GD"]
        summary["Gaussian inputs: full-KQ LSA vs optimal preconditioned GD"] = (
            f"{verdict(r['loss_ratio'] <= 1.02)}: test loss {r['test_loss']:.5f} vs optimal "
            f"Γ* {r['reference_loss']:.5f} (ratio {r['loss_ratio']:.4f}, target ≤ 1.02); "
            f"fitted Γ {fitted.loss if fitted else math.nan:.5f}; plain GD {gd.loss:.5f}; "
            f"cosine(learned −PV_yy·KQ_xx, Γ*) {r['preconditioner_cosine']:.4f} "
            f"(condition number of Σ: {cfg.gaussian_condition:g})"
        )
    for name, r in by_name.items():
        if r["plateau"] and "stuck" in r["plateau"]:
            summary[f"{name} plateau"] = r["plateau"]


def _context_sweep(
    cfg: ICLConfig,
    models: dict[str, TokenModel],
    specs: dict[str, ModelSpec],
    refs: dict[str, dict[str, Reference]],
) -> list[dict[str, Any]]:
    if "uniform" not in refs:
        return []
    sampler = make_sampler(cfg, "uniform").shifted(n_ctx=2 * cfg.d, noise_std=cfg.sweep_noise)
    tasks = sampler.sample(cfg.sweep_tasks, generator(4 * 10**6 + cfg.seed), torch.float64)
    lam = max(cfg.sweep_noise**2, 1e-3)
    predictors: dict[str, Any] = {
        name: _model_fn(m) for name, m in models.items() if specs[name].tasks == "uniform"
    }
    for name in ("GD", "GD x2", "GD++ x2", "GD++ x3"):
        if name in refs["uniform"]:
            predictors[name] = refs["uniform"][name].predictor
    predictors["OLS"] = OLS()
    predictors[f"ridge (λ = {lam:g})"] = Ridge(lam)
    predictors["zero"] = ZeroPredictor()
    rows = []
    for n in range(1, 2 * cfg.d + 1):
        sub = tasks.with_context(n)
        for name, pred in predictors.items():
            rows.append(
                {
                    "kind": "context_sweep",
                    "model": name,
                    "n_ctx": n,
                    "test_loss": eval_loss(pred, sub),
                    "noise_std": cfg.sweep_noise,
                }
            )
    return rows


def _ood(
    cfg: ICLConfig,
    models: dict[str, TokenModel],
    specs: dict[str, ModelSpec],
    refs: dict[str, dict[str, Reference]],
) -> list[dict[str, Any]]:
    if "uniform" not in refs:
        return []
    base = make_sampler(cfg, "uniform")
    predictors: dict[str, Any] = {
        name: _model_fn(m) for name, m in models.items() if specs[name].tasks == "uniform"
    }
    for name in ("GD", "GD++ x2"):
        if name in refs["uniform"]:
            predictors[name] = refs["uniform"][name].predictor
    predictors["OLS"] = OLS()
    rows = []
    for shift, scales in (("input_scale", cfg.input_scales), ("teacher_scale", cfg.teacher_scales)):
        for alpha in scales:
            sampler = base.shifted(**{shift: float(alpha)})
            tasks = sampler.sample(cfg.sweep_tasks, generator(5 * 10**6 + cfg.seed), torch.float64)
            for name, pred in predictors.items():
                rows.append(
                    {
                        "kind": "ood",
                        "shift": shift,
                        "alpha": float(alpha),
                        "model": name,
                        "test_loss": eval_loss(pred, tasks),
                    }
                )
    return rows


def json_rows(result: StudyResult) -> list[dict[str, Any]]:
    """The ``--json`` view: one object per trained model with exactly :data:`JSON_KEYS`."""
    return [{k: r.get(k) for k in JSON_KEYS} for r in result.rows if r.get("kind") == "model"]


def config_dict(cfg: ICLConfig) -> dict[str, Any]:
    """The config as a plain dict."""
    return asdict(cfg)
