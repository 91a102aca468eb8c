"""The ``verify`` runner: the certificate rows, a summary line and a check per dtype, and the
certificate figure, as a :class:`~attnreg.studies.common.StudyResult` built from two
:class:`~attnreg.studies.common.Section` objects."""

from __future__ import annotations

from dataclasses import asdict, replace

from attnreg.progress import Progress
from attnreg.studies.common import Section, StudyResult
from attnreg.studies.verify.certificate import certificate
from attnreg.studies.verify.claims import certificate_claims
from attnreg.studies.verify.config import VerifyConfig
from attnreg.studies.verify.figures import certificate_figure
from attnreg.studies.verify.sign import literal_sign_distances, sign_claims, sign_sentence
from attnreg.thresholds import check


def run(cfg: VerifyConfig | None = None, progress: Progress | None = None) -> StudyResult:
    """The verify study, two sections: the certificate (:func:`certificate_section`) and von
    Oswald et al.'s summary as written (:func:`sign_section`); ``progress`` advances once per
    dtype. Writes nothing."""
    cfg = cfg or VerifyConfig()
    result = StudyResult("verify", asdict(cfg), [])
    result.add(certificate_section(cfg, progress or Progress.quiet()))
    result.add(sign_section(cfg))
    return result


def certificate_section(cfg: VerifyConfig, progress: Progress) -> Section:
    """The certificate rows of every dtype, a summary line and a check per dtype (all rows
    within their tolerance), the certificate figure and the claims the rows decide."""
    with progress.stage("verify", total=len(cfg.dtypes)) as stage:
        rows = []
        for dtype in cfg.dtypes:
            rows += certificate(replace(cfg, dtypes=[dtype]))
            stage.advance(label=dtype)
    section = Section(rows, figures=[certificate_figure(rows, cfg)])
    for dtype in cfg.dtypes:
        mine = [r for r in rows if r["dtype"] == dtype]
        worst = max(mine, key=lambda r: r["rel_err"] / r["tol"])
        passed = sum(r["passed"] for r in mine)
        section.summary[f"{dtype} certificate"] = (
            f"{passed} of {len(mine)} checks pass; largest relative "
            f"error {max(r['rel_err'] for r in mine):.1e}; closest to its tolerance: "
            f"{worst['construction']} on {worst['shape']} ({worst['rel_err']:.1e} vs "
            f"{worst['tol']:.1e})."
        )
        section.checks.append(
            check(f"{dtype} rows within their tolerance", passed, ">=", len(mine))
        )
    section.claims = certificate_claims(rows, cfg.dtypes)
    return section


def sign_section(cfg: VerifyConfig) -> Section:
    """Von Oswald et al.'s summary sentence as written against the layer it describes: the
    distances of both signs (no rows), the sentence and its claims."""
    plus, minus = literal_sign_distances(cfg.seed)
    return Section(
        summary={"von Oswald summary, as written": sign_sentence(plus, minus)},
        claims=sign_claims(plus, minus),
    )
