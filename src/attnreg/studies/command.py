"""One command line for every study, built from the registry.

``attnreg verify|compare|icl|capacity`` all take the same options — ``--quick/--full``,
``--config FILE`` (its fields replace the profile's), ``--set KEY=VALUE`` (repeatable, applied
after the file), ``--seed``, ``--out``, ``--json``, ``--device``, ``--progress/--no-progress`` —
plus a few of their own (the ``extras`` of the study's
:class:`~attnreg.studies.spec.StudySpec`), which are shorthands for config fields. Every user
error (unreadable or invalid config file, unknown key, wrong type, bad device, bad value: the
config refuses it when built, before anything runs) is one line on stderr naming the culprit,
exit status 2; a study whose checks fail exits with 1.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import typer
import yaml

from attnreg.config import (
    check_device,
    config_from_dict,
    config_to_dict,
    read_config_file,
    read_yaml,
)
from attnreg.output import rows_to_json
from attnreg.progress import terminal_progress
from attnreg.studies.common import StudyResult
from attnreg.studies.registry import STUDIES
from attnreg.studies.spec import StudyConfig, StudySpec

USAGE_ERROR = 2


def fail(message: str) -> NoReturn:
    """A user error: one line on stderr, exit status 2."""
    typer.echo(f"Error: {' '.join(str(message).split())}", err=True)
    raise typer.Exit(code=USAGE_ERROR)


def parse_set(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; each value is read as YAML (``3``, ``1e-3``, ``[a, b]``, ``true``)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        try:
            out[key.strip()] = read_yaml(value)
        except yaml.YAMLError as exc:
            raise ValueError(f"--set {item!r}: the value is not valid YAML") from exc
    return out


def build_config(
    spec: StudySpec,
    full: bool,
    config_file: Path | None,
    sets: dict[str, Any],
    seed: int | None,
    device: str | None,
) -> StudyConfig:
    """The profile's config, with the file's fields, then ``--set``, ``--seed`` and ``--device``
    (where the config has a device field) replacing its values; the config checks every value
    when built (a ``ValueError`` naming the key)."""
    values = config_to_dict(spec.profile("full" if full else "quick"))
    if config_file is not None:
        values |= read_config_file(config_file)
    values |= sets
    if seed is not None:
        values["seed"] = seed
    if device is not None:
        check_device("--device", device)
        if "device" in spec.field_names():
            values["device"] = device
        elif device != "cpu":
            raise ValueError(
                f"--device: the {spec.name} study runs on the CPU only, got {device!r}"
            )
    return config_from_dict(spec.config_class, values)


def _run(spec: StudySpec, options: dict[str, Any]) -> None:
    if options["quick"] and options["full"]:
        fail("--quick and --full: choose one")
    sets: dict[str, Any] = {}
    try:
        for extra in spec.extras:
            value = options[_param(extra.flag)]
            if value is not None:
                try:
                    sets[extra.field] = extra.parse(value)
                except ValueError as exc:
                    raise ValueError(f"{extra.flag} {value!r}: {exc}") from exc
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
    """``--json``: the rows (or the study's own ``json_view`` of them, where it has one);
    otherwise the summary, the checks and where the files went."""
    if as_json:
        typer.echo(rows_to_json(spec.json_rows(result)))
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from attnreg.studies.answers import cell_text, format_against, is_table

    console = Console()
    for question, answer in result.summary.items():
        if not is_table(answer):
            console.print(f"[bold]{escape(question)}[/bold]: {escape(str(answer))}")
            continue
        table = Table(*answer["columns"], title=answer["lead"], title_justify="left")
        for row in answer["rows"]:
            table.add_row(*(escape(cell_text(c)) for c in row))
        console.print(f"[bold]{escape(question)}[/bold]")
        console.print(table)
        if answer.get("note"):
            console.print(escape(answer["note"]))
    for claim in result.claims:
        console.print(
            f"[bold]claim[/bold] ({escape(claim.source.short())}): "
            f"{escape(claim.verdict_text())}. {escape(claim.why())}"
        )
    for check in result.checks:
        mark = "[green]pass[/green]" if check["passed"] else "[red]FAIL[/red]"
        value = format_against(check["value"], check["limit"], 4)
        console.print(f"{mark} {check['check']}: {value} {check['op']} {check['limit']}")
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
            typer.Option(
                None, "--device", help="Torch device: cpu (the profiles' default), cuda or mps."
            ),
            str | None,
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
    """The typer command of study ``spec``: the common options plus its ``extras``."""
    params = _common_parameters()
    for extra in spec.extras:
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
    command.__doc__ = spec.help
    command.__name__ = f"{spec.name}_command"
    return command


def register_studies(app: typer.Typer) -> None:
    """Attach ``attnreg NAME`` for every study of the registry."""
    for name, spec in STUDIES.items():
        app.command(name, help=spec.help)(make_command(spec))
