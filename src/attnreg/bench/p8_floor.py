"""P8's floor for DeltaNet: the matrix products of the chunked WY (UT-transform) form alone.

The chunked delta rule (Yang et al. 2024, "Parallelizing linear transformers with the delta rule
over sequence length"; :func:`attnreg.sequence.delta_rule.delta_chunked`) does, per block of ``C``
tokens and head, the products ``G = K Kᵀ`` (for ``A = tril(diag(β) G, −1)``), ``P = Q Kᵀ``,
``W = Tβ K`` and ``Ũ = Tβ V`` with ``Tβ = (I + A)⁻¹ diag(β)``; then, in order over the blocks,
``U = Ũ − W S`` and ``S ← S + Kᵀ U``; and the outputs ``O = Q S + tril(P) U``.

:func:`wy_products` prepares everything else once, outside the call it returns: the block-major
copies of the inputs and the triangular inverses ``Tβ`` (computed from the inputs, so that the
call's output is the layer's output). The call does only the products above — plus the in-place
causal mask of ``P``, without which its output would not be the layer's — on preallocated
buffers, ``segment`` tokens of every head at a time (the layout of ``delta_chunked``). Its time
is a floor for any implementation of this form with PyTorch's batched products on the machine
that runs it; :func:`attnreg.bench.p8_sequence.bench_p8` reports its fraction of the matmul
rate beside DeltaNet's.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnreg.bench.sequence_workload import Inputs
from attnreg.sequence.delta_rule import ut_inverse
from attnreg.sequence.tiling import block_major

FLOOR_CHUNKS = (32, 64)
SEGMENT = 512


def wy_products(x: Inputs, chunk: int, segment: int = SEGMENT) -> Callable[[], torch.Tensor]:
    """The timed call: the chunked WY products of DeltaNet on the workload ``x`` (queries scaled
    by ``d_k^{-1/2}``, as :func:`attnreg.bench.sequence_workload.attnreg_call` scales them),
    returning the block-major outputs ``(N, B·H, C, d_v)`` (:func:`unblock_output` gives
    ``(B, H, T, d_v)``). ``T`` must be a multiple of ``chunk``."""
    q, k, v = x["q"] * x["q"].shape[-1] ** -0.5, x["k"], x["v"]
    if q.shape[2] % chunk:
        raise ValueError(f"chunk: the length {q.shape[2]} is not a multiple of {chunk}")
    qb, kb, vb = (block_major(t, chunk).contiguous() for t in (q, k, v))
    beta = block_major(x["beta"], chunk).unsqueeze(-1)
    tb = ut_inverse(kb, beta, None) * beta.mT  # Tβ = T diag(β)
    n_blocks, heads, _, d_k = kb.shape
    d_v = vb.shape[-1]
    per = max(1, segment // chunk)
    buf = {
        "g": kb.new_empty(per, heads, chunk, chunk),
        "p": kb.new_empty(per, heads, chunk, chunk),
        "w": kb.new_empty(per, heads, chunk, d_k),
        "u_tilde": kb.new_empty(per, heads, chunk, d_v),
        "u": kb.new_empty(per, heads, chunk, d_v),
        "s": kb.new_empty(per + 1, heads, d_k, d_v),
    }
    out = kb.new_empty(n_blocks, heads, chunk, d_v)

    def run() -> torch.Tensor:
        s = buf["s"]
        s[0].zero_()
        for start in range(0, n_blocks, per):
            m = min(per, n_blocks - start)
            seg = slice(start, start + m)

            def flat(t: torch.Tensor) -> torch.Tensor:
                return t.view(-1, *t.shape[2:])

            qs, ks, vs, ts = flat(qb[seg]), flat(kb[seg]), flat(vb[seg]), flat(tb[seg])
            torch.bmm(ks, ks.mT, out=flat(buf["g"][:m]))
            p = torch.bmm(qs, ks.mT, out=flat(buf["p"][:m])).tril_()
            torch.bmm(ts, ks, out=flat(buf["w"][:m]))
            torch.bmm(ts, vs, out=flat(buf["u_tilde"][:m]))
            state = s[0]
            for j in range(m):
                u = torch.baddbmm(buf["u_tilde"][j], buf["w"][j], state, alpha=-1, out=buf["u"][j])
                state = torch.baddbmm(state, kb[start + j].mT, u, out=s[j + 1])
            o = torch.bmm(qs, flat(s[:m]), out=flat(out[seg]))
            o.baddbmm_(p, flat(buf["u"][:m]))
            s[0].copy_(state)
        return out

    return run


def unblock_output(out: torch.Tensor, batch: int) -> torch.Tensor:
    """Block-major ``(N, B·H, C, d_v)`` outputs as ``(B, H, T, d_v)``."""
    n_blocks, heads, chunk, d_v = out.shape
    return out.transpose(0, 1).reshape(batch, heads // batch, n_blocks * chunk, d_v)
