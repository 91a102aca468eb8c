"""Every sequence layer is a regression (Wang, Shi & Fox 2025, "Test-time regression").

At every position t each layer fits a regression to the past keys and values ``(k_i, v_i)``,
``i ≤ t``, and reads it out at the query ``q_t``: linear attention and its decayed forms (one
gradient step on a weighted least-squares loss), the delta rule (online least squares) and
Gated DeltaNet (with weight decay), Longhorn (the implicit online step), Mesa (decayed ridge
solved exactly), softmax attention (the Nadaraya–Watson smoother) and local linear attention
(the kernel-weighted local-linear fit). One contract: ``layer(q, k, v, …) -> o`` with shapes
``(B, H, T, d_k), (B, H, T, d_k), (B, H, T, d_v) -> (B, H, T, d_v)``.
"""

from attnreg.sequence.comba import comba
from attnreg.sequence.delta_product import delta_product
from attnreg.sequence.delta_rule import delta_rule
from attnreg.sequence.forgetting import forgetting_attention
from attnreg.sequence.generalized_delta import generalized_delta_rule
from attnreg.sequence.linear_attention import linear_attention
from attnreg.sequence.local_linear import local_linear_attention
from attnreg.sequence.log_linear import log_linear_attention
from attnreg.sequence.longhorn import longhorn
from attnreg.sequence.mesa import mesa
from attnreg.sequence.modules import (
    DeltaRuleLayer,
    LinearAttentionLayer,
    LocalLinearAttentionLayer,
    LonghornLayer,
    MesaNetLayer,
    SequenceLayer,
    SoftmaxAttentionLayer,
)
from attnreg.sequence.momentum_delta import momentum_delta_rule
from attnreg.sequence.softmax import softmax_attention
from attnreg.sequence.stick_breaking import stick_breaking_attention
from attnreg.sequence.titans import titans
from attnreg.sequence.ttt import ttt_linear

__all__ = [
    "DeltaRuleLayer",
    "LinearAttentionLayer",
    "LocalLinearAttentionLayer",
    "LonghornLayer",
    "MesaNetLayer",
    "SequenceLayer",
    "SoftmaxAttentionLayer",
    "comba",
    "delta_product",
    "delta_rule",
    "forgetting_attention",
    "generalized_delta_rule",
    "linear_attention",
    "local_linear_attention",
    "log_linear_attention",
    "longhorn",
    "mesa",
    "momentum_delta_rule",
    "softmax_attention",
    "stick_breaking_attention",
    "titans",
    "ttt_linear",
]
