"""A ready-to-deploy repository's `.runpod/hub.json` and `.runpod/tests.json`, as RunPod's
Hub publishing guide describes them.

`hub.json` says how the repository is listed and deployed: `title`, `description`,
`category`, and `config` (`runsOn`, `endpointType`, `containerDiskInGb`, `gpuCount`,
`gpuIds`, `allowedCudaVersions`, `env`, `presets`). Each `env` entry is a fixed `value` or
a typed `input` (string, number, boolean or huggingface) with its default, options, bounds
and `advanced` flag. `tests.json` lists `tests` (name, input, `timeout` in milliseconds)
and a `config` of the test machine; a test passes when its job completes (HTTP 200).

A file in `.runpod/` overrides the file of the same name at the repository's root
(`runpod_path`). Keys RunPod does not document are ignored, as the Hub ignores them: files
in the wild carry others. `parse_hub` and `parse_tests` refuse anything else with one line
that names the file and the field (`hub.json: config.env[2].input.default: …`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from lockgate.models.warmup import WORKER_PATH, HttpMethod

RUNPOD_DIR = ".runpod"  # its files override the repository root's
HUB_FILE = "hub.json"
TESTS_FILE = "tests.json"
# The categories the guide lists; listings in the wild use others ("llm"), so any is kept.
CATEGORIES = ("audio", "embedding", "language", "video", "image")
DEFAULT_TEST_TIMEOUT_MS = 300_000  # the guide gives no default; lockgate's choice: 5 min
ENV_KEY = r"^[A-Za-z_][A-Za-z0-9_]*$"
CUDA_VERSION = r"^\d+\.\d+$"

M = TypeVar("M", bound=BaseModel)
Scalar = str | int | float | bool
EnvKey = Annotated[str, Field(pattern=ENV_KEY, max_length=256)]
CudaVersions = list[Annotated[str, Field(pattern=CUDA_VERSION)]]


class HubFileError(ValueError):
    """A hub.json or tests.json that cannot be used; the message is one line naming the
    file and the field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class HubOption(_Model):
    """One choice of an option input: what the form shows and the variable's value."""

    label: str
    value: Scalar


class HubInput(_Model):
    """A variable the person deploying fills in, with its type, default and bounds."""

    type: Literal["string", "number", "boolean", "huggingface"]
    name: str | None = None
    description: str | None = None
    default: Scalar | None = None
    options: list[HubOption] | None = None
    min: float | None = None
    max: float | None = None
    advanced: bool = False  # hidden by default in the form
    required: bool = False
    trueValue: str | None = None  # boolean inputs: the variable's text when on …
    falseValue: str | None = None  # … and when off

    @model_validator(mode="after")
    def _consistent(self) -> HubInput:
        if self.type != "number" and (self.min is not None or self.max is not None):
            raise ValueError("min and max are for number inputs only")
        if self.type != "boolean" and (self.trueValue is not None or self.falseValue is not None):
            raise ValueError("trueValue and falseValue are for boolean inputs only")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}")
        if self.options is not None and not self.options:
            raise ValueError("options: give at least one option, or leave options out")
        if self.default is not None:
            check_value(self, self.default, "default: ")
        return self


class HubEnv(_Model):
    """One environment variable: a fixed `value`, or an `input` the form asks for."""

    key: EnvKey
    value: Scalar | None = None
    input: HubInput | None = None

    @model_validator(mode="after")
    def _one_of(self) -> HubEnv:
        if (self.value is None) == (self.input is None):
            raise ValueError(f"{self.key}: give one of value (fixed) or input (asked)")
        return self


class HubPreset(_Model):
    """A named group of variable values the form offers in a dropdown."""

    name: Annotated[str, Field(min_length=1)]
    defaults: dict[EnvKey, Scalar] = Field(default_factory=dict)


class HubConfig(_Model):
    """How the repository's endpoint is deployed."""

    runsOn: Literal["GPU", "CPU"]
    endpointType: Literal["LB"] | None = None  # None: a queue endpoint
    containerDiskInGb: Annotated[int, Field(gt=0)]
    cpuFlavor: str | None = None  # required when runsOn is CPU
    gpuCount: Annotated[int, Field(ge=1)] | None = None  # required when runsOn is GPU
    # Comma-separated pool or GPU ids, `-` before one to exclude it; None: any GPU. The
    # guide marks it required on GPU, but listings without it exist, so it is optional.
    gpuIds: str | None = None
    allowedCudaVersions: CudaVersions | None = None
    env: list[HubEnv] = Field(default_factory=list)
    presets: list[HubPreset] = Field(default_factory=list)

    @model_validator(mode="after")
    def _machine(self) -> HubConfig:
        if self.runsOn == "GPU" and self.gpuCount is None:
            raise ValueError("gpuCount is required when runsOn is GPU")
        if self.runsOn == "CPU" and not self.cpuFlavor:
            raise ValueError("cpuFlavor is required when runsOn is CPU")
        keys = [entry.key for entry in self.env]
        if dup := sorted({k for k in keys if keys.count(k) > 1}):
            raise ValueError(f"env: {', '.join(dup)} declared more than once")
        for preset in self.presets:
            for key, value in preset.defaults.items():
                found = self.input_of(key)
                if found is not None:
                    check_value(found, value, f"presets {preset.name!r}: {key}: ")
        return self

    def input_of(self, key: str) -> HubInput | None:
        """The input that asks for `key`; None for a fixed or undeclared variable."""
        return next((e.input for e in self.env if e.key == key), None)

    @property
    def endpoint_type(self) -> str:
        """lockgate's `type` of the endpoint: `LB`, or `QUEUE` when endpointType is absent."""
        return self.endpointType or "QUEUE"

    def gpu_ids(self) -> tuple[list[str], list[str]]:
        """`gpuIds` as (allowed, excluded): `"ADA_24,-NVIDIA GeForce RTX 4090"` ->
        (['ADA_24'], ['NVIDIA GeForce RTX 4090'])."""
        words = [w.strip() for w in (self.gpuIds or "").split(",") if w.strip()]
        allowed = [w for w in words if not w.startswith("-")]
        return allowed, [w[1:].strip() for w in words if w.startswith("-")]


class HubFile(_Model):
    """`.runpod/hub.json`: the listing and its deployment settings."""

    title: Annotated[str, Field(min_length=1)]
    description: str
    type: Literal["serverless"] = "serverless"
    category: Annotated[str, Field(min_length=1)]
    iconUrl: str | None = None
    config: HubConfig


class HubTest(_Model):
    """One test: a job input that must complete within `timeout` milliseconds. On a
    load-balancing endpoint, the input is the JSON body of an HTTP request that must be
    answered 200 within it: `method` (lockgate's, default POST; a GET sends no body) to
    `path` (lockgate's, default `/`) of the worker, through the load-balancing route.
    RunPod's tests.json names neither: a queue endpoint's test ignores them."""

    name: Annotated[str, Field(min_length=1)]
    input: dict[str, Any]
    timeout: Annotated[int, Field(gt=0)] | None = None  # milliseconds
    method: HttpMethod = "POST"
    path: Annotated[str, Field(max_length=2048, pattern=WORKER_PATH)] = "/"

    @property
    def timeout_s(self) -> float:
        """The time the test has, in seconds (`DEFAULT_TEST_TIMEOUT_MS` when not given)."""
        return (self.timeout or DEFAULT_TEST_TIMEOUT_MS) / 1000


class HubTestEnv(_Model):
    """A variable of the test machine."""

    key: EnvKey
    value: Scalar


class HubTestsConfig(_Model):
    """The machine the tests run on."""

    gpuTypeId: str | None = None
    gpuCount: Annotated[int, Field(ge=1)] | None = None
    cpuFlavor: str | None = None
    env: list[HubTestEnv] = Field(default_factory=list)
    allowedCudaVersions: CudaVersions | None = None


class HubTests(_Model):
    """`.runpod/tests.json`: the tests a build must pass before it takes traffic."""

    tests: Annotated[list[HubTest], Field(min_length=1)]
    config: HubTestsConfig | None = None

    @model_validator(mode="after")
    def _unique_names(self) -> HubTests:
        names = [t.name for t in self.tests]
        if dup := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"test names must be unique: {', '.join(dup)} repeated")
        return self


# -- values -------------------------------------------------------------------------------


def check_value(field: HubInput, value: Scalar, prefix: str = "") -> None:
    """Raise ValueError unless `value` suits the input: its type, one of its options, within
    its bounds."""
    if field.options is not None:
        allowed = [o.value for o in field.options]
        if value not in allowed:
            shown = ", ".join(str(v) for v in allowed)
            raise ValueError(f"{prefix}{value!r} is not one of the options ({shown})")
        return
    if field.type == "boolean":
        if not isinstance(value, bool):
            raise ValueError(f"{prefix}{value!r} is not true or false")
    elif field.type == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{prefix}{value!r} is not a number")
        if field.min is not None and value < field.min:
            raise ValueError(f"{prefix}{value:g} is below min {field.min:g}")
        if field.max is not None and value > field.max:
            raise ValueError(f"{prefix}{value:g} is above max {field.max:g}")
    elif not isinstance(value, str):
        raise ValueError(f"{prefix}{value!r} is not a string")


def env_text(field: HubInput | None, value: Scalar) -> str:
    """A value as the variable's text: a boolean input's `trueValue`/`falseValue` (default
    `true`/`false`), a whole number without `.0`, anything else as written."""
    if isinstance(value, bool):
        if field is not None and field.type == "boolean":
            chosen = field.trueValue if value else field.falseValue
            if chosen is not None:
                return chosen
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def hub_env(config: HubConfig, preset: str | None = None) -> dict[str, str]:
    """The variables a deployment with the form left as it is gets: fixed values, each
    input's default (inputs without one are left out), then the preset's values over them.
    Raises HubFileError for a preset the file does not have."""
    out = {}
    for entry in config.env:
        if entry.value is not None:
            out[entry.key] = env_text(None, entry.value)
        elif entry.input is not None and entry.input.default is not None:
            out[entry.key] = env_text(entry.input, entry.input.default)
    if preset is not None:
        chosen = next((p for p in config.presets if p.name == preset), None)
        if chosen is None:
            names = ", ".join(repr(p.name) for p in config.presets) or "none"
            raise HubFileError(f"hub.json: no preset {preset!r} (presets: {names})")
        for key, value in chosen.defaults.items():
            out[key] = env_text(config.input_of(key), value)
    return out


def env_for_tests(tests: HubTests) -> dict[str, str]:
    """The variables `tests.json`'s `config.env` gives the test worker."""
    entries = tests.config.env if tests.config else []
    return {entry.key: env_text(None, entry.value) for entry in entries}


# -- files --------------------------------------------------------------------------------


def runpod_path(repo: Path, name: str) -> Path | None:
    """Where the repository keeps `name` (hub.json, tests.json, Dockerfile, handler.py…):
    `.runpod/name` when it is there, else `name` at the root; None when neither is."""
    for path in (repo / RUNPOD_DIR / name, repo / name):
        if path.is_file():
            return path
    return None


def parse_hub(text: str) -> HubFile:
    """A hub.json's text as a HubFile; HubFileError (one line naming the field) otherwise."""
    return _parse(HubFile, HUB_FILE, text)


def parse_tests(text: str) -> HubTests:
    """A tests.json's text as a HubTests; HubFileError (one line naming the field) otherwise."""
    return _parse(HubTests, TESTS_FILE, text)


def _parse(model: type[M], name: str, text: str) -> M:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        where = f"line {err.lineno} column {err.colno}"
        raise HubFileError(f"{name}: not valid JSON at {where}: {err.msg}") from err
    if not isinstance(data, dict):
        raise HubFileError(f"{name}: must be a JSON object, not {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise HubFileError(f"{name}: {first_error(err)}") from err


def first_error(err: ValidationError) -> str:
    """The first of pydantic's errors on one line: `config.env[2].input: message`."""
    e = err.errors(include_url=False)[0]
    where = field_path(e["loc"])
    message = re.sub(r"^Value error, ", "", e["msg"])
    if e["type"] == "missing":
        message = "required"
    elif e["type"] == "literal_error":
        message = f"{e['input']!r} is not allowed; {message[0].lower()}{message[1:]}"
    return f"{where}: {message}" if where else message


def field_path(loc: tuple[int | str, ...]) -> str:
    """A pydantic location as a JSON path: ('config', 'env', 2, 'key') -> config.env[2].key.
    The tags pydantic adds for union members (`str`, `int`, …) are dropped."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _UNION_TAGS or part.startswith(("function-", "constrained-")):
            continue
        else:
            out += f".{part}" if out else part
    return out


_UNION_TAGS = {"str", "int", "float", "bool", "none", "HubInput", "list[...]", "dict[...]"}
