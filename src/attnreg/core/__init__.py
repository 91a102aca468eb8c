"""The core: input checks, whitening, and the chunked similarity-separation-projection kernel."""

from attnreg.core.attention import (
    SEPARATIONS,
    SIMILARITIES,
    Attention,
    Hooked,
    HookPoint,
    associate,
    separate,
    similarity_scores,
    whitened_metric,
)
from attnreg.core.validation import as_tensor, check_tasks
from attnreg.core.whitening import ConditioningWarning, RankWarning, Whitening, whitening_matrix

__all__ = [
    "SEPARATIONS",
    "SIMILARITIES",
    "Attention",
    "ConditioningWarning",
    "HookPoint",
    "Hooked",
    "RankWarning",
    "Whitening",
    "as_tensor",
    "associate",
    "check_tasks",
    "separate",
    "similarity_scores",
    "whitened_metric",
    "whitening_matrix",
]
