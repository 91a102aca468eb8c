"""One command line for every study, built from the registry.

``attnreg verify|compare|icl|capacity`` all take the same options — ``--quick/--full``,
``--config FILE`` (its fields replace the profile's), ``--set KEY=VALUE`` (repeatable, applied
after the file), ``--seed``, ``--out``, ``--json``, ``--device``, ``--progress/--no-progress`` —
plus a few of their own (:data:`EXTRAS`), which are shorthands for config fields. Every user
error (unreadable or invalid config file, unknown key, wrong type, bad device, bad value) is one
line on stderr naming the culprit, exit status 2; a study whose checks fail exits with 1.
"""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import typer
import yaml

from attnreg.config import config_from_dict, config_to_dict
from attnreg.core.validation import check_seed
from attnreg.output import rows_to_json
from attnreg.progress import terminal_progress
from attnreg.studies.common import StudyResult
from attnreg.studies.registry import STUDIES, StudySpec

USAGE_ERROR = 2


@dataclass(frozen=True)
class Extra:
    """A study's own option: ``--flag VALUE`` sets config field ``field`` to ``parse(VALUE)``."""

    flag: str
    field: str
    help: str
    parse: Callable[[str], Any] = str


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _dtypes(text: str) -> list[str]:
    return ["float64", "float32"] if text == "both" else _names(text)


EXTRAS: dict[str, tuple[Extra, ...]] = {
    "verify": (
        Extra("--dtype", "dtypes", "Precision to check: float64, float32 or both.", _dtypes),
        Extra("--tol-scale", "tol_scale", "Multiply every tolerance by this factor.", float),
        Extra("--ridge", "ridge", "Ridge λ of the ridge-form constructions (> 0).", float),
    ),
    "icl": (
        Extra("--models", "models", "Comma-separated subset of the models to train.", _names),
        Extra("--threads", "threads", "Torch intra-op threads (1 is fastest here).", int),
    ),
    "compare": (),
    "capacity": (),
}

HELP: dict[str, str] = {
    "verify": "The equivalence certificate: build every construction (OLS-Transformer, "
    "OLS-attention, GD/GD++/preconditioned LSA, mesa layer) from random tasks, including "
    "degenerate and extreme-scale designs, run its forward pass and compare it with numpy / "
    "scikit-learn. Exit status 1 if any row exceeds its tolerance.",
    "compare": "Attention variants (softmax, regression-like, whitened; data whitening, "
    "shared/separate/single W_q W_kᵀ, layer norm) trained on synthetic, diabetes and sine data "
    "against ridge and OLS; the OLS-Transformer trained from scratch; the blog's open questions "
    "answered with numbers.",
    "icl": "Linear and softmax self-attention trained on in-context regression tasks (von Oswald "
    "et al. 2023) and compared with line-searched GD, GD++, preconditioned GD, OLS and ridge: "
    "losses, alignment, learned η, context-size and out-of-distribution sweeps.",
    "capacity": "Associative-memory capacity N_max(d) of the pseudo-inverse (regression) memory, "
    "Hebbian Hopfield, dense associative memories and softmax modern Hopfield, with theory "
    "curves; the Universal Hopfield similarity × separation grid on scikit-learn's digits.",
}


def fail(message: str) -> NoReturn:
    """A user error: one line on stderr, exit status 2."""
    typer.echo(f"Error: {' '.join(str(message).split())}", err=True)
    raise typer.Exit(code=USAGE_ERROR)


def read_config_file(path: Path) -> dict[str, Any]:
    """The mapping in a YAML (``safe_load``) or JSON file; a clear ``ValueError`` otherwise."""
    if not path.is_file():
        raise ValueError(f"--config {str(path)!r}: no such file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"--config {str(path)!r}: not a UTF-8 text file (byte {exc.start}); expected YAML "
            "or JSON"
        ) from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--config {str(path)!r}: invalid JSON ({exc})") from exc
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ValueError(f"--config {str(path)!r}: invalid YAML{line} ({problem})") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"--config {str(path)!r}: must hold a mapping of config keys to values")
    return data


def parse_set(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; each value is read as YAML (``3``, ``1e-3``, ``[a, b]``, ``true``)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise ValueError(f"--set {item!r}: the value is not valid YAML") from exc
    return out


def check_device(device: str) -> str:
    """A device this torch can use: ``cpu``, or ``cuda``/``mps`` where available."""
    import torch

    try:
        kind = torch.device(device).type
    except RuntimeError as exc:
        raise ValueError(f"--device {device!r}: not a torch device ({exc})") from exc
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device!r}: this torch build has no usable CUDA device")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"--device {device!r}: MPS is not available here")
    if kind not in ("cpu", "cuda", "mps"):
        raise ValueError(f"--device {device!r}: use cpu, cuda or mps")
    return device


def build_config(
    spec: StudySpec,
    full: bool,
    config_file: Path | None,
    sets: dict[str, Any],
    seed: int | None,
    device: str,
) -> Any:
    """The profile's config, with the file's fields, then ``--set``, ``--seed`` and ``--device``
    (where the config has a device field) replacing its values; validated."""
    values = config_to_dict(spec.profile("full" if full else "quick"))
    if config_file is not None:
        values |= read_config_file(config_file)
    values |= sets
    fields = set(spec.field_names())
    if seed is not None:
        values["seed"] = seed
    if "device" in fields:
        values["device"] = check_device(device)
    elif device != "cpu":
        raise ValueError(f"--device {device!r}: the {spec.name} study runs on the CPU only")
    config: Any = config_from_dict(spec.config_cls(), values)
    if "seed" in fields:
        check_seed("seed", config.seed)
    return config


def _run(spec: StudySpec, options: dict[str, Any]) -> None:
    if options["quick"] and options["full"]:
        fail("--quick and --full: choose one")
    sets: dict[str, Any] = {}
    try:
        for extra in EXTRAS[spec.name]:
            value = options[_param(extra.flag)]
            if value is not None:
                sets[extra.field] = extra.parse(value)
        sets |= parse_set(options["set"] or [])
        config = build_config(
            spec,
            options["full"],
            options["config"],
            sets,
            options["seed"],
            options["device"],
        )
    except (ValueError, TypeError) as exc:
        fail(str(exc))
    out: Path = options["out"] or Path("results") / spec.name
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"--out {str(out)!r}: cannot create the folder ({exc.strerror})")
    try:
        with terminal_progress(options["progress"]) as progress:
            result = spec.run(config, out, progress)
    except ValueError as exc:
        fail(str(exc))
    _report(spec, result, out, options["json"])
    if any(not check["passed"] for check in result.checks):
        raise typer.Exit(code=1)


def _report(spec: StudySpec, result: StudyResult, out: Path, as_json: bool) -> None:
    """``--json``: the rows (or the study's own ``json_rows`` view of them, where it has one);
    otherwise the summary, the checks and where the files went."""
    if as_json:
        view = getattr(importlib.import_module(spec.module), "json_rows", None)
        typer.echo(rows_to_json(view(result) if callable(view) else result.rows))
        return
    from rich.console import Console

    console = Console()
    for question, answer in result.summary.items():
        console.print(f"[bold]{question}[/bold]: {answer}")
    for check in result.checks:
        mark = "[green]pass[/green]" if check["passed"] else "[red]FAIL[/red]"
        console.print(
            f"{mark} {check['check']}: {check['value']:.4g} {check['op']} {check['limit']}"
        )
    console.print(f"{len(result.rows)} rows, figures and tables in {out}")


def _param(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _common_parameters() -> list[inspect.Parameter]:
    def option(name: str, default: Any, annotation: Any) -> inspect.Parameter:
        return inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
        )

    return [
        option("quick", typer.Option(False, "--quick", help="Quick profile (the default)."), bool),
        option("full", typer.Option(False, "--full", help="Full profile (published scale)."), bool),
        option(
            "config",
            typer.Option(
                None,
                "--config",
                help="YAML or JSON file of config fields; they replace the profile's values.",
            ),
            Path | None,
        ),
        option(
            "set",
            typer.Option(
                None,
                "--set",
                help="KEY=VALUE, repeatable: a config field (the value is read as YAML), "
                "applied after --config.",
            ),
            list[str] | None,
        ),
        option(
            "seed",
            typer.Option(None, "--seed", help="Seed of the run (default: the profile's)."),
            int | None,
        ),
        option(
            "out",
            typer.Option(
                None, "--out", help="Folder for rows (CSV/JSON), figures and checkpoints."
            ),
            Path | None,
        ),
        option(
            "json",
            typer.Option(False, "--json", help="Print the rows as JSON instead of the summary."),
            bool,
        ),
        option(
            "device",
            typer.Option("cpu", "--device", help="Torch device: cpu (default), cuda or mps."),
            str,
        ),
        option(
            "progress",
            typer.Option(
                True,
                "--progress/--no-progress",
                help="Show nested progress (stages, steps) on stderr when it is a terminal.",
            ),
            bool,
        ),
    ]


def make_command(spec: StudySpec) -> Callable[..., None]:
    """The typer command of study ``spec``: the common options plus its :data:`EXTRAS`."""
    params = _common_parameters()
    for extra in EXTRAS[spec.name]:
        params.append(
            inspect.Parameter(
                _param(extra.flag),
                inspect.Parameter.KEYWORD_ONLY,
                default=typer.Option(None, extra.flag, help=extra.help),
                annotation=str | None,
            )
        )

    def command(**options: Any) -> None:
        _run(spec, options)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__doc__ = HELP[spec.name]
    command.__name__ = f"{spec.name}_command"
    return command


def register_studies(app: typer.Typer) -> None:
    """Attach ``attnreg NAME`` for every study of the registry."""
    for name, spec in STUDIES.items():
        app.command(name, help=HELP[name])(make_command(spec))
