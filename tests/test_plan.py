"""Same arguments, same plan: the command line and `loadertop.sweep()` build their Settings through one function,
so they plan the same trials and reject the same bad values with the same line."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import loadertop
from loadertop.core.engine.drive import api
from loadertop.core.engine.search.adaptive import make_planner
from loadertop.core.machine.facts import usable_cpus
from loadertop.core.model.config import Settings, UsageError, adaptive_cap, auto_workers, settings_options
from loadertop.faces.cli import build_parser, settings_from_args

pytestmark = pytest.mark.unit

ApiSettings = Callable[..., Settings]
USER = str(Path(__file__).parent / "data" / "counted.py")  # a factory that exists: the settings look it up


class Started(Exception):
    """Raised by the stand-in Sweep: the API built its Settings and would now start measuring."""


@pytest.fixture
def api_settings(monkeypatch: pytest.MonkeyPatch) -> ApiSettings:
    """`loadertop.sweep(...)` up to the sweep it would start; returns the Settings it built."""

    def no_sweep(settings: Settings, out_dir: object = None) -> None:
        raise Started(settings)

    monkeypatch.setattr(api, "Sweep", no_sweep)

    def build(*args: Any, **kwargs: Any) -> Settings:
        with pytest.raises(Started) as started:
            loadertop.sweep(*args, **kwargs)
        return started.value.args[0]

    return build


def cli_settings(*argv: str) -> Settings:
    return settings_from_args(build_parser().parse_args(list(argv)))


SAME = [
    pytest.param([], None, {}, id="defaults"),
    pytest.param(["--workers", "0-8"], None, {"workers": range(9)}, id="workers 0-8"),
    pytest.param(["--search", "grid"], None, {"search": "grid"}, id="grid"),
    pytest.param(["--ranks", "2"], None, {"ranks": 2}, id="ranks 2"),
    pytest.param(["--batch-size", "32,64"], None, {"batch_size": [32, 64]}, id="batch sizes"),
    pytest.param(
        ["--dataset", f"{USER}:make", "--dataset-arg", "root=/data", "--dataset-arg", "size=64"],
        f"{USER}:make",
        {"dataset_args": {"root": "/data", "size": "64"}},
        id="user dataset",
    ),
    pytest.param(
        ["--workers", "0,2,4", "--pin-memory", "on,off", "--tolerance", "0.1", "--no-skip-warmup", "--ranks", "2"],
        None,
        {"workers": [4, 2, 0], "pin_memory": [True, False], "tolerance": 0.1, "skip_warmup": False, "ranks": 2},
        id="mixed",
    ),
]


@pytest.mark.parametrize(("argv", "dataset", "kwargs"), SAME)
def test_same_arguments_same_settings_and_plan(
    api_settings: ApiSettings, argv: list[str], dataset: str | None, kwargs: dict[str, Any]
) -> None:
    by_cli, by_api = cli_settings(*argv), api_settings(dataset, **kwargs)
    assert by_cli == by_api
    plan = make_planner(by_cli, None).planned()
    assert plan and plan == make_planner(by_api, None).planned()


def test_auto_workers_are_the_adaptive_climb_per_rank(api_settings: ApiSettings) -> None:
    # The API once took the grid's ladder for `auto` and ignored ranks; now `auto` means what the CLI means.
    cpus = usable_cpus()
    assert api_settings().workers == tuple(range(adaptive_cap(cpus) + 1))
    assert api_settings(ranks=2).workers[-1] == adaptive_cap(max(1, cpus // 2))
    assert api_settings(search="grid").workers == auto_workers(cpus)


# What each kind of Option takes from Python, as SweepOptions spells it (the source text of its annotation).
API_TYPES = {
    "text": "str",
    "size": "str | Literal[0]",
    "pairs": "Mapping[str, str] | Iterable[str | tuple[str, str]]",
    "workers": "Ints",
    "ints": "Ints",
    "bools": "Bools",
    "methods": "str | Iterable[str]",
    "words": "str | Iterable[str]",
    "number": "float",
    "count": "int",
    "flag": "bool",
}


def test_the_api_keywords_are_typed_one_per_option_by_its_kind() -> None:
    # A new Option without its keyword in SweepOptions (or with another type than its kind takes) fails here.
    options = {opt.key: opt for _, opt in settings_options() if opt.key != "dataset"}  # dataset: sweep's own
    assert set(api.SweepOptions.__annotations__) == set(options) == api.SweepOptions.__optional_keys__
    for key, opt in options.items():
        spelled = api.SweepOptions.__annotations__[key].__forward_arg__  # a string under `from __future__`
        choices = f"Literal[{', '.join(map(repr, opt.choices))}]"
        assert spelled == (choices if opt.kind == "choice" else API_TYPES[opt.kind]), key


def test_defaults_are_the_fields_own(api_settings: ApiSettings) -> None:
    # The parser declares no default: a flag not given is the Settings field's default (workers: `auto`).
    built = cli_settings()
    assert dataclasses.replace(built, workers=Settings().workers, transport=False, stages="off") == Settings()
    assert built.transport and api_settings().transport  # users get the transport ceiling; tests' Settings() skip it
    assert built.stages == api_settings().stages == "auto"  # users get the stages when cheap; tests' Settings() not


BAD = [
    pytest.param(["--tolerance", "5"], {"tolerance": 5}, "--tolerance", id="tolerance"),
    pytest.param(["--ranks", "0"], {"ranks": 0}, "--ranks", id="ranks 0"),
    pytest.param(["--ranks", "65"], {"ranks": 65}, "--ranks", id="ranks 65"),
    pytest.param(
        ["--consumer", "steps:train", "--step-ms", "5"],
        {"consumer": "steps:train", "step_ms": 5},
        "--step-ms",
        id="consumer with step-ms",
    ),
    pytest.param(["--mem-floor", "lots"], {"mem_floor": "lots"}, "--mem-floor", id="mem floor"),
    pytest.param(["--mem-floor", "100%"], {"mem_floor": "100%"}, "below 100%", id="mem floor share"),
    pytest.param(["--batch-size", "0"], {"batch_size": 0}, "--batch-size", id="batch size"),
    pytest.param(["--workers", "8-2"], {"workers": "8-2"}, "backwards", id="workers range"),
    pytest.param(["--workers", "-1"], {"workers": [-1]}, "negative", id="workers negative"),
    pytest.param(["--pin-memory", "maybe"], {"pin_memory": "maybe"}, "--pin-memory", id="pin memory"),
    pytest.param(["--trial-seconds", "-1"], {"trial_seconds": -1}, "--trial-seconds", id="trial seconds"),
    pytest.param(["--interval", "0"], {"interval": 0}, "--interval", id="interval"),
    pytest.param(["--start-method", "thread"], {"start_method": "thread"}, "--start-method", id="start method"),
    pytest.param(["--files-per-sample", "0"], {"files_per_sample": 0}, "--files-per-sample", id="files"),
    pytest.param(["--dataset-arg", "novalue"], {"dataset_args": ["novalue"]}, "KEY=VALUE", id="dataset arg"),
]


@pytest.mark.parametrize(("argv", "kwargs", "needle"), BAD)
def test_the_api_rejects_what_the_cli_rejects(
    api_settings: ApiSettings, argv: list[str], kwargs: dict[str, Any], needle: str
) -> None:
    with pytest.raises(UsageError, match=needle) as by_cli:
        cli_settings(*argv)
    with pytest.raises(UsageError) as by_api:  # raised before any sweep starts (no Started)
        api_settings(**kwargs)
    assert str(by_api.value) == str(by_cli.value)
    assert "\n" not in str(by_api.value)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"batch_sizes": [32]}, "unknown setting 'batch_sizes'"),
        ({"search": "random"}, "choose from adaptive, grid"),
        ({"workers": [1.5]}, "not a whole number"),
        ({"dataset_args": {"size": 64}}, "values are text"),
        ({"skip_warmup": "no"}, "True or False"),
        ({"min_blocks": 1}, "at least 2"),
    ],
)
def test_the_api_checks_python_values(api_settings: ApiSettings, kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        api_settings(**kwargs)
