"""The icl study's claims ledger: von Oswald et al. 2023 (arXiv 2212.07677), tested by the
trained models' rows against the config's thresholds (the same thresholds as the checks).

The paper's regime (:data:`PAPER_REGIME`) is a converged model on its tasks; a row whose training
ended stuck on a loss plateau does not meet it, and its claim gets no verdict."""

from __future__ import annotations

from typing import Any

from attnreg.studies.icl.config import ICLConfig
from attnreg.studies.ledger import EMPIRICAL, Claim, Quote, Regime, Threshold
from attnreg.studies.sources import VON_OSWALD

PAPER_REGIME = (
    "one linear self-attention layer (and recurrent multi-layer LSA for GD++), d = N = 10, "
    "uniform inputs, w ~ N(0, I), trained with Adam until the loss plateaus; metric: test loss "
    "against GD with the line-searched η, sensitivity cosine, learned η"
)
CONFIG_ORIGIN = (
    "the config's check field {name} (attnreg's tolerance; the paper shows the losses and "
    "cosines as overlapping curves, Fig. 2, without a number)"
)


def _regime(rows: dict[str, dict[str, Any]], cfg: ICLConfig) -> Regime:
    stuck = [n for n, r in rows.items() if r.get("plateau") and "stuck" in r["plateau"]]
    run = f"d = {cfg.d}, N = {cfg.n_ctx}, {cfg.steps} Adam steps, batch {cfg.batch}"
    if stuck:
        return Regime(
            PAPER_REGIME,
            f"{run}; ended stuck on a loss plateau: {', '.join(stuck)}",
            False,
            "training until the loss leaves its plateau (more steps or another seed)",
        )
    return Regime(PAPER_REGIME, run + "; no model ended on a plateau", True)


def icl_claims(rows: list[dict[str, Any]], cfg: ICLConfig) -> list[Claim]:
    """One claim per measured property of the trained one-layer LSA models (``lsa-1`` and its
    multi-head variants) and the recurrent GD++ models present in ``rows``."""
    models = {r["model"]: r for r in rows if r.get("kind") == "model"}
    one = {n: r for n, r in models.items() if n.startswith("lsa-1") and n != "lsa-1-gaussian"}
    deep = {n: r for n, r in models.items() if n.endswith("recurrent-gdpp")}
    out = []
    if one:
        regime = _regime(one, cfg)
        gd = Quote(
            VON_OSWALD,
            "a trained one-layer linear self-attention model is one step of gradient descent: "
            "its loss, its input sensitivities and its step size match GD's",
            "Section 3 and Fig. 2",
            verbatim=False,
        )
        out += [
            Claim(
                gd,
                EMPIRICAL,
                "test loss / line-searched GD's",
                {n: float(r["loss_ratio"]) for n, r in one.items()},
                Threshold("<=", cfg.max_loss_ratio, CONFIG_ORIGIN.format(name="max_loss_ratio")),
                regime=regime,
            ),
            Claim(
                gd,
                EMPIRICAL,
                "cosine of the input sensitivities with GD's",
                {n: float(r["cos_sensitivity"]) for n, r in one.items()},
                Threshold(
                    ">=",
                    cfg.min_sensitivity_cosine,
                    CONFIG_ORIGIN.format(name="min_sensitivity_cosine"),
                ),
                regime=regime,
            ),
            Claim(
                gd,
                EMPIRICAL,
                "relative error of the learned η",
                {
                    n: abs(r["learned_eta"] - r["reference_eta"]) / r["reference_eta"]
                    for n, r in one.items()
                },
                Threshold("<=", cfg.max_eta_error, CONFIG_ORIGIN.format(name="max_eta_error")),
                regime=regime,
            ),
        ]
    if deep:
        out.append(
            Claim(
                Quote(
                    VON_OSWALD,
                    "trained recurrent multi-layer linear self-attention implements GD++",
                    "Section 4",
                    verbatim=False,
                ),
                EMPIRICAL,
                "test loss / fitted GD++'s",
                {n: float(r["loss_ratio"]) for n, r in deep.items()},
                Threshold(
                    "<=", cfg.max_loss_ratio_gdpp, CONFIG_ORIGIN.format(name="max_loss_ratio_gdpp")
                ),
                regime=_regime(deep, cfg),
            )
        )
    return out
