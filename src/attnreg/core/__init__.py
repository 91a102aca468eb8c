"""The core: input checks, whitening, and the attention core with its paths and hook points."""

from attnreg.core.attention import PATHS, Attention, choose_path
from attnreg.core.hooks import Hooked, HookPoint
from attnreg.core.retrieval import associate, whitened_metric
from attnreg.core.scores import SEPARATIONS, SIMILARITIES, separate, similarity_scores
from attnreg.core.tasks import check_tasks
from attnreg.core.validation import as_tensor
from attnreg.core.whitening import ConditioningWarning, RankWarning, Whitening, whitening_matrix

__all__ = [
    "PATHS",
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
    "choose_path",
    "separate",
    "similarity_scores",
    "whitened_metric",
    "whitening_matrix",
]
