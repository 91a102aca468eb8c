"""The ``verify`` runner: the certificate rows, a summary line and a check per dtype, and the
certificate figure, as a :class:`~attnreg.studies.common.StudyResult`."""

from __future__ import annotations

from dataclasses import asdict, replace

from attnreg.progress import Progress
from attnreg.studies.common import StudyResult
from attnreg.studies.verify.certificate import certificate
from attnreg.studies.verify.claims import certificate_claims
from attnreg.studies.verify.config import VerifyConfig
from attnreg.studies.verify.figures import certificate_figure
from attnreg.studies.verify.sign import literal_sign_distances, sign_claims, sign_sentence
from attnreg.thresholds import check


def run(cfg: VerifyConfig | None = None, progress: Progress | None = None) -> StudyResult:
    """The verify study: the certificate rows, a one-line summary and a check per dtype (all
    rows within their tolerance), and the certificate figure; ``progress`` advances once per
    dtype. Writes nothing."""
    cfg = cfg or VerifyConfig()
    progress = progress or Progress.quiet()
    with progress.stage("verify", total=len(cfg.dtypes)) as stage:
        rows = []
        for dtype in cfg.dtypes:
            rows += certificate(replace(cfg, dtypes=[dtype]))
            stage.advance(label=dtype)
    summary = {}
    checks = []
    for dtype in cfg.dtypes:
        mine = [r for r in rows if r["dtype"] == dtype]
        worst = max(mine, key=lambda r: r["rel_err"] / r["tol"])
        passed = sum(r["passed"] for r in mine)
        summary[f"{dtype} certificate"] = (
            f"{passed} of {len(mine)} checks pass; largest relative "
            f"error {max(r['rel_err'] for r in mine):.1e}; closest to its tolerance: "
            f"{worst['construction']} on {worst['shape']} ({worst['rel_err']:.1e} vs "
            f"{worst['tol']:.1e})."
        )
        checks.append(check(f"{dtype} rows within their tolerance", passed, ">=", len(mine)))
    plus, minus = literal_sign_distances(cfg.seed)
    summary["von Oswald summary, as written"] = sign_sentence(plus, minus)
    figures = [certificate_figure(rows, cfg)]
    result = StudyResult("verify", asdict(cfg), rows, figures, summary, checks)
    result.claims = certificate_claims(rows, cfg.dtypes) + sign_claims(plus, minus)
    return result
