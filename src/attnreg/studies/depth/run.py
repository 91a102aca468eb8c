"""``depth`` — depth against conditioning: the depth atlas of the fixed-weight stacks, what
trained deep layers compute, and noise with the Bayes-optimal estimator.

1. The atlas (:mod:`attnreg.depth`): layers each of GD, GD++, preconditioned GD and
   Newton–Schulz needs to come within ε of OLS, against the theory, with fitted slopes (GD:
   layers ∝ κ̂; Newton: ∝ log κ̂).
2. Trained stacks (:mod:`attnreg.studies.depth.trained`): every layer's prediction matched to
   the iterates of GD, preconditioned GD and Newton–Schulz by distance, and the deepest stack's
   layers by Fu et al. 2024's metric (cosine of the error vectors; the best-matching Newton and
   GD step per layer, its trend against the null of exact GD iterates).
3. Noise (:mod:`attnreg.studies.depth.noise`): error against the number of context points
   beside OLS / min-norm, the Bayes-optimal ridge and the closed forms; trained stacks against
   least squares on noiseless tasks (Garg et al. 2022) and against the Bayes ridge by depth
   and width (Akyürek et al. 2023); the mixed-noise setting of Vladymyrov et al. (2024) with
   ConstRR, AdaRR and TunedRR.

The ``--json`` view: the atlas rows (``method``, ``kappa``, ``n_ctx``, ``eps``,
``layers_needed``, ``theory_layers``, …) and the trained-layer rows (``layer``, ``method``,
``best_match``, ``match_error``, ``residual_cosine``, …).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from attnreg.core.threads import torch_threads
from attnreg.depth import AtlasGrid, depth_atlas, fit_slopes
from attnreg.progress import Progress
from attnreg.studies.common import FigureRecord, Section, StudyResult
from attnreg.studies.depth.claims import middle_eps, noise_claims, slope_claims, trained_claims
from attnreg.studies.depth.config import DepthConfig
from attnreg.studies.depth.noise import curve_rows, mixed_rows, noiseless_rows
from attnreg.studies.depth.summary import atlas_summary, lead, noise_summary, trained_summary
from attnreg.studies.depth.trained import trained_rows


def atlas_grid(cfg: DepthConfig) -> AtlasGrid:
    """The atlas cells of ``cfg``."""
    return AtlasGrid(
        d=cfg.atlas_d,
        kappas=tuple(cfg.kappas),
        n_ctx=tuple(cfg.atlas_n_ctx),
        eps=tuple(cfg.eps),
        cap=cfg.cap,
        n_query=cfg.atlas_queries,
        noise=cfg.atlas_noise,
        seed=cfg.seed,
    )


def run(cfg: DepthConfig | None = None, progress: Progress | None = None) -> StudyResult:
    """The atlas, the trained stacks and the noise curves of ``cfg`` (module docstring); rows,
    figures, summary, checks and the claims ledger (:mod:`~attnreg.studies.depth.claims`).
    Writes nothing. Runs with ``cfg.threads`` torch threads."""
    cfg = cfg or DepthConfig()
    with torch_threads(cfg.threads):
        return _run(cfg, progress or Progress.quiet())


def _run(cfg: DepthConfig, progress: Progress) -> StudyResult:
    start = time.perf_counter()
    result = StudyResult("depth", asdict(cfg), [], summary={"answer": ""})
    parts = set(cfg.parts)
    if "atlas" in parts:
        result.add(atlas_section(cfg, progress))
    if "trained" in parts:
        result.add(trained_section(cfg, progress))
    if parts & {"noise", "noiseless", "mixed"}:
        result.add(noise_section(cfg, progress))
    slopes = [r for r in result.rows if r["kind"] == "slope"]
    result.summary["answer"] = lead(result.claims, slopes, cfg)
    result.summary["wall time"] = f"{time.perf_counter() - start:.1f} s ({cfg.threads} thread(s))"
    return result


def _caption(text: str, cfg: DepthConfig) -> str:
    return f"{text} (attnreg depth, seed {cfg.seed})"


def atlas_section(cfg: DepthConfig, progress: Progress) -> Section:
    """The depth atlas: its rows and fitted slopes, the slope claims, the Newton-slope check,
    the atlas figure and the slopes table."""
    from attnreg.studies.depth.figures import atlas_figure

    with progress.stage("atlas", total=1) as stage:
        atlas = [{"kind": "atlas", **r} for r in depth_atlas(atlas_grid(cfg), n_threads=None)]
        stage.advance()
    slopes = [{"kind": "slope", **s} for s in fit_slopes(atlas)]
    eps = middle_eps(cfg)
    summary, checks = atlas_summary(cfg, atlas, slopes)
    figure = FigureRecord(
        "depth_atlas",
        _caption(
            f"Layers to reach ε = {eps:g} of OLS against κ, one line per method, theory dashed", cfg
        ),
        atlas_figure(atlas, eps),
    )
    return Section(
        rows=atlas + slopes,
        summary=summary,
        checks=checks,
        figures=[figure],
        tables={"depth_slopes": slopes},
        claims=list(slope_claims(atlas + slopes, eps, cfg.cap)),
    )


def trained_section(cfg: DepthConfig, progress: Progress) -> Section:
    """The trained stacks: their rows, Fu et al.'s claims, the depth check, the figure and the
    matches table."""
    from attnreg.studies.depth.figures import trained_figure

    rows = trained_rows(cfg, progress)
    summary, checks = trained_summary(cfg, rows)
    figure = FigureRecord(
        "depth_trained",
        _caption("Trained stacks' loss per layer beside each method's loss per iterate", cfg),
        trained_figure(rows),
    )
    return Section(
        rows=rows,
        summary=summary,
        checks=checks,
        figures=[figure],
        tables={"depth_matches": [r for r in rows if r["kind"] == "trained"]},
        claims=list(trained_claims(rows, max(cfg.train_layers), cfg.steps)),
    )


def noise_section(cfg: DepthConfig, progress: Progress) -> Section:
    """The noise parts of ``cfg.parts`` (``noise``: the curves and the depth × width grid;
    ``noiseless``; ``mixed``): their rows, the Garg, Akyürek and Vladymyrov claims, the curve
    check and the noise figure."""
    from attnreg.studies.depth.figures import noise_figure

    parts = set(cfg.parts)
    curve = curve_rows(cfg, progress) if "noise" in parts else []
    noiseless = noiseless_rows(cfg, progress) if "noiseless" in parts else []
    mixed = mixed_rows(cfg, progress) if "mixed" in parts else []
    claims = noise_claims(curve + noiseless + mixed, cfg)
    summary, checks = noise_summary(cfg, curve, mixed, claims, noiseless)
    figure = FigureRecord(
        "depth_noise",
        _caption("Error against context size with noise, and the mixed-noise setting", cfg),
        noise_figure(curve, mixed, noiseless),
    )
    return Section(
        rows=curve + noiseless + mixed,
        summary=summary,
        checks=checks,
        figures=[figure],
        claims=list(claims),
    )


JSON_KINDS = ("atlas", "trained")


def json_rows(result: StudyResult) -> list[dict[str, Any]]:
    """The ``--json`` view: the atlas rows and the trained-layer rows."""
    return [r for r in result.rows if r.get("kind") in JSON_KINDS]
