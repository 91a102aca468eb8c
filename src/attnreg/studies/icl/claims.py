"""The icl study's claims ledger: von Oswald et al. 2023 (arXiv 2212.07677), tested by the
trained models' rows against the config's thresholds (the same thresholds as the checks)."""

from __future__ import annotations

from typing import Any

from attnreg.studies.icl.config import ICLConfig
from attnreg.studies.ledger import Claim

SOURCE = "von Oswald et al. 2023 (arXiv 2212.07677)"


def icl_claims(rows: list[dict[str, Any]], cfg: ICLConfig) -> list[Claim]:
    """One claim per measured property of the trained one-layer LSA models (``lsa-1`` and its
    multi-head variants) and the recurrent GD++ models present in ``rows``."""
    models = {r["model"]: r for r in rows if r.get("kind") == "model"}
    one = {n: r for n, r in models.items() if n.startswith("lsa-1") and n != "lsa-1-gaussian"}
    deep = {n: r for n, r in models.items() if n.endswith("recurrent-gdpp")}
    out = []
    if one:
        out += [
            Claim(
                SOURCE,
                "a trained one-layer linear self-attention model is one step of gradient descent",
                "test loss / line-searched GD's",
                "<=",
                cfg.max_loss_ratio,
                {n: float(r["loss_ratio"]) for n, r in one.items()},
            ),
            Claim(
                SOURCE,
                "… it responds to its inputs as the GD step does",
                "cosine of the input sensitivities with GD's",
                ">=",
                cfg.min_sensitivity_cosine,
                {n: float(r["cos_sensitivity"]) for n, r in one.items()},
            ),
            Claim(
                SOURCE,
                "… with the learning rate η of the line-searched step",
                "relative error of the learned η",
                "<=",
                cfg.max_eta_error,
                {
                    n: abs(r["learned_eta"] - r["reference_eta"]) / r["reference_eta"]
                    for n, r in one.items()
                },
            ),
        ]
    if deep:
        out.append(
            Claim(
                SOURCE,
                "trained recurrent multi-layer linear self-attention implements GD++",
                "test loss / fitted GD++'s",
                "<=",
                cfg.max_loss_ratio_gdpp,
                {n: float(r["loss_ratio"]) for n, r in deep.items()},
            )
        )
    return out
