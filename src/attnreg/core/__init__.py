"""The core: input checks, whitening, and the chunked similarity-separation-projection kernel."""

from attnreg.core.attention import SEPARATIONS, SIMILARITIES, associate, separate, similarity_scores
from attnreg.core.validation import as_tensor, check_tasks
from attnreg.core.whitening import ConditioningWarning, RankWarning, Whitening, whitening_matrix

__all__ = [
    "SEPARATIONS",
    "SIMILARITIES",
    "ConditioningWarning",
    "RankWarning",
    "Whitening",
    "as_tensor",
    "associate",
    "check_tasks",
    "separate",
    "similarity_scores",
    "whitening_matrix",
]
