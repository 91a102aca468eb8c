"""One form everywhere: attention is computed by the core, nowhere else.

Every module of ``src/attnreg`` outside the two kernel packages must compute
``sep(β·sim(Q, K))·V`` through the core (``attnreg.core.Attention`` or
``attnreg.core.associate``). The kernel packages are ``attnreg/core/`` (the one form) and
``attnreg/sequence/`` (the second form, causal test-time regression: its recurrences and
chunked forms are the layers' own kernels, tested against numpy and flash-linear-attention).
The scan below parses each module (``ast``) and flags what computes attention by hand:

1. **softmax** — a call of ``softmax``, ``log_softmax``, ``logsumexp`` or
   ``scaled_dot_product_attention`` (as ``torch.x(…)``, ``F.x(…)`` or ``t.x(…)``), and the
   shifted exponential of a hand-written (online) softmax: ``exp`` of a difference,
   ``torch.exp(a − b)`` or ``(a − b).exp()``.
2. **query × key scores** — a matrix product whose right operand is a transpose and whose left
   operand is not: ``A @ B.mT``, ``A @ B.T``, ``A @ B.transpose(-1, -2)``, ``A @ B.t()`` and
   the same inside ``matmul``/``bmm``/``mm``/``baddbmm``. It contracts the feature axis of two
   token matrices and gives a tokens × tokens score matrix ``Q Kᵀ``. A product whose *left*
   operand is the transpose (``XᵀX``, ``Kᵀ V``) contracts the token axis: a Gram of the
   features or a covariance, not attention, and passes. So does a product with a
   feature-space factor on either side, recognised by its name: weights and their factors
   (``w``, ``w0``, ``wq``, ``w_k``, …), metrics and whitening factors (``metric``, ``lmat``,
   ``lk``, ``chol``, ``vecs``) and matrix factorisations (``cholesky(…)``, ``pinv(…)``, …), i.e.
   ``d × d`` or ``dy × d`` matrices, not a context.
3. **einsum with a contraction** — an ``einsum`` in which an index is summed over (it appears
   in two operands and not in the output): the scan cannot tell a token axis from a feature
   axis, so every contracting einsum outside the core is flagged (write a Gram as
   ``x.mT @ x``).

Files that compute these on purpose are allow-listed below, each with its one-line reason
(closed-form estimators, data generation, whitening and covariances, benchmark references).
The scanner itself is tested on planted violations and on code that must pass.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "attnreg"
KERNELS = ("core/", "sequence/")

SOFTMAX_CALLS = {"softmax", "log_softmax", "logsumexp", "scaled_dot_product_attention"}
MATMUL_CALLS = {"matmul", "bmm", "mm", "baddbmm"}
# a transposed operand with one of these names is a feature-space factor, not a context
FACTOR = re.compile(r"^_?(w|w\d+|w[a-z]|w_\w+|\w+_w|metric|lmat|lk|chol|vecs)$")
FACTORISATIONS = {"cholesky", "qr", "eigh", "svd", "inv", "pinv"}

ALLOWED: dict[str, str] = {
    "estimators/least_squares.py": "closed-form estimators, the references attention is "
    "checked against: the dual ridge Gram X Xᵀ + λI",
    "estimators/gradient.py": "closed-form estimators, the references attention is checked "
    "against: predictions x* Wᵀ from GD weights",
    "estimators/kernel.py": "the local-linear estimator's softmax weights, the reference of local "
    "linear attention (the kernel smoother beside it runs through the core)",
    "data/regression.py": "data generation: the covariance Q Λ Qᵀ from its eigenvectors",
    "data/tasks.py": "data generation: the task covariance Q Λ Qᵀ from its eigenvectors",
    "bench/p2_retrieval.py": "benchmark: PyTorch's fused SDPA, the reference the core is timed "
    "against",
    "bench/p7_kernel_smoother.py": "benchmark: the SDPA timing reference and a float64 softmax "
    "over all keys for the agreement check",
    "bench/p8_floor.py": "benchmark: the chunked delta rule's matrix products alone (K Kᵀ, "
    "Q Kᵀ, …), timed as the floor of the form beside attnreg.sequence's implementation",
    "studies/verify/cases.py": "designs built from SVD factors (data generation)",
    "studies/verify/checks.py": "the preconditioned-GD row's d × d preconditioner G Gᵀ/d + I",
    "studies/verify/references.py": "the numpy references the sequence layers are certified "
    "against: the decayed sum Σ γ (q_tᵀk_i) v_i and the softmax weights of the smoothers",
    "memory/classical.py": "the asynchronous dense-associative-memory sweep updates the "
    "overlaps one coordinate at a time (the core's step is synchronous)",
    "constructions/mesa.py": "Sherman–Morrison updates of a d × d inverse",
    "studies/depth/iterates.py": "the reference iterations (GD, preconditioned GD, "
    "Newton–Schulz) in closed form: d × d iterates applied to the queries",
    "constructions/newton.py": "Newton's start α = 2/‖S Sᵀ‖_F of the d × d Gram S = XᵀX + λI",
    "studies/verify/stack_references.py": "the numpy references the stacks are certified "
    "against: the GD, GD++, Newton–Schulz and kernel Richardson iterations and their "
    "rounding-error magnitudes",
    "studies/verify/stack_rows.py": "Newton's start α from ‖S Sᵀ‖_F of the d × d Gram S = XᵀX",
    "studies/layers/memory.py": "DeltaNet written pass after pass over the same stored pairs "
    "until its residual is below a tolerance: the affine pass map S ← S A + B and the "
    "read-back S kᵢ, which no sequence layer computes (checked against a numpy LMS loop)",
}


def _name(node: ast.AST) -> str:
    """The last name of an operand: ``self.w_k`` → ``w_k``, ``x[..., :b]`` → ``x``,
    ``w.to(dtype)`` → ``w``, ``np.linalg.cholesky(s)`` → ``cholesky``."""
    while True:
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in FACTORISATIONS:
                return node.func.attr
            node = node.func.value
        elif isinstance(node, ast.Attribute):
            return node.attr
        elif isinstance(node, ast.Name):
            return node.id
        else:
            return ""


def _transposed(node: ast.AST) -> ast.AST | None:
    """The operand ``B`` if ``node`` is ``B.mT``, ``B.T``, ``B.t()`` or ``B.transpose(-1, -2)``."""
    if isinstance(node, ast.Attribute) and node.attr in ("mT", "T"):
        return node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "t" and not node.args:
            return node.func.value
        if node.func.attr == "transpose" and len(node.args) == 2:
            dims = {ast.unparse(a) for a in node.args}
            if dims == {"-1", "-2"}:
                return node.func.value
    return None


def _scores(left: ast.AST, right: ast.AST) -> bool:
    """``left @ right`` is a ``Q Kᵀ`` product over a context (rule 2 of the module docstring)."""
    inner = _transposed(right)
    if inner is None or _transposed(left) is not None:
        return False
    return not any(_factor(side) for side in (left, inner))


def _factor(node: ast.AST) -> bool:
    name = _name(node)
    return bool(FACTOR.match(name)) or name in FACTORISATIONS


def _contracting_einsum(call: ast.Call) -> bool:
    if not call.args or not isinstance(call.args[0], ast.Constant):
        return True  # a spec we cannot read: flag it
    spec = str(call.args[0].value).replace(" ", "")
    inputs, _, output = spec.partition("->")
    operands = inputs.split(",")
    for index in set("".join(operands)) - set(output) - {"."}:
        if sum(index in op for op in operands) >= 2:
            return True
    return False


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _is_difference(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)


def scan(source: str) -> list[tuple[int, str]]:
    """``(line, construct)`` of every hand-written attention construct in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            if _scores(node.left, node.right):
                found.append((node.lineno, "Q Kᵀ score product"))
        elif isinstance(node, ast.Call):
            name = _call_name(node)
            if name in SOFTMAX_CALLS:
                found.append((node.lineno, f"{name}(…)"))
            elif name in ("exp", "exp_"):
                receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
                if any(_is_difference(a) for a in node.args) or _is_difference(receiver):
                    found.append((node.lineno, "shifted exp (hand-written softmax)"))
            elif name in MATMUL_CALLS and len(node.args) >= 2:
                if _scores(node.args[-2], node.args[-1]):
                    found.append((node.lineno, f"{name}(…) score product"))
            elif name == "einsum" and _contracting_einsum(node):
                found.append((node.lineno, "contracting einsum"))
    return sorted(found)


def _modules() -> list[Path]:
    return sorted(
        p for p in SRC.rglob("*.py") if not p.relative_to(SRC).as_posix().startswith(KERNELS)
    )


def test_no_attention_outside_the_core():
    offences = []
    for path in _modules():
        rel = path.relative_to(SRC).as_posix()
        if rel in ALLOWED:
            continue
        for line, what in scan(path.read_text(encoding="utf-8")):
            offences.append(f"src/attnreg/{rel}:{line}: {what}")
    assert not offences, (
        "attention computed outside attnreg.core (use attnreg.core.Attention / associate, "
        "or allow-list the file with a reason):\n" + "\n".join(offences)
    )


def test_every_allow_list_entry_exists_has_a_reason_and_is_needed():
    for rel, reason in ALLOWED.items():
        path = SRC / rel
        assert path.is_file(), rel
        assert reason.strip(), rel
        assert scan(path.read_text(encoding="utf-8")), f"{rel} is allow-listed but clean"


@pytest.mark.parametrize(
    "planted",
    [
        "w = torch.softmax(q @ k.mT, dim=-1)",
        "w = scores.softmax(-1)",
        "w = F.log_softmax(s, -1)",
        "z = torch.logsumexp(s, -1)",
        "o = scaled_dot_product_attention(q, k, v)",
        "a = acc * torch.exp(best - new_best)",
        "a = (s - m).exp()",
        "s = x_query @ x_ctx.mT",
        "s = q @ metric @ keys.T",
        "s = q @ k.transpose(-1, -2)",
        "s = q @ k.transpose(-2, -1)",
        "s = torch.bmm(q, k.mT)",
        "s = torch.matmul(states, patterns[:, :b].mT)",
        "s = torch.einsum('bmd,bnd->bmn', q, k)",
        "s = torch.einsum(spec, q, k)",
    ],
)
def test_the_scan_flags_a_planted_violation(planted):
    assert scan(f"import torch\n\n\ndef f(q, k, v):\n    {planted}\n    return 0\n"), planted


@pytest.mark.parametrize(
    "clean",
    [
        "g = x.mT @ x",  # a Gram of the features
        "state = k.mT @ v",  # the linear-attention state Kᵀ V
        "m = lmat @ lmat.mT",  # a whitening metric L Lᵀ
        "y = xq @ w.mT",  # a prediction from weights
        "p = self.w_q @ self.w_k.mT",  # W_q W_kᵀ
        "b = metric @ x.mT @ y",  # effective weights M XᵀY
        "x = z @ np.linalg.cholesky(sigma).T",  # data from a Cholesky factor
        "e = torch.exp(x)",
        "o = torch.einsum('bka,bme->bmkae', c, xq)",  # an outer product, nothing summed
        "o = associate(q, k, v, separation='softmax')",
    ],
)
def test_the_scan_passes_what_is_not_attention(clean):
    assert not scan(
        f"def f(q, k, v, x, xq, c, lmat, w, self, metric, y, z, np, sigma):\n    {clean}\n"
    ), clean
