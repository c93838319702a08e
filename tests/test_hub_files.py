"""`.runpod/hub.json` and `.runpod/tests.json`: RunPod's documented examples parse, a bad
file is one line naming the field, the environment a deployment gets, and `.runpod/`
overriding the repository root."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lockgate.models.hub import (
    HubFileError,
    env_for_tests,
    hub_env,
    parse_hub,
    parse_tests,
    runpod_path,
)

# RunPod's hub.json template (Hub publishing guide), as published.
HUB_TEMPLATE = {
    "title": "Your Tool's Name",
    "description": "A brief explanation of what your tool does",
    "type": "serverless",
    "category": "language",
    "iconUrl": "https://your-icon-url.com/icon.png",
    "config": {
        "runsOn": "GPU",
        "containerDiskInGb": 20,
        "gpuCount": 1,
        "gpuIds": "RTX A4000,-NVIDIA GeForce RTX 4090",
        "allowedCudaVersions": [
            "12.8",
            "12.7",
            "12.6",
            "12.5",
            "12.4",
            "12.3",
            "12.2",
            "12.1",
            "12.0",
        ],
        "presets": [
            {
                "name": "Preset Name",
                "defaults": {"STRING_ENV_VAR": "value1", "INT_ENV_VAR": 10, "BOOL_ENV_VAR": True},
            },
        ],
        "env": [
            {"key": "STATIC_ENV_VAR", "value": "static_value"},
            {
                "key": "STRING_ENV_VAR",
                "input": {
                    "name": "User-friendly Name",
                    "type": "string",
                    "description": "Description of this input",
                    "default": "default value",
                    "advanced": False,
                },
            },
            {
                "key": "OPTION_ENV_VAR",
                "input": {
                    "name": "Select Option",
                    "type": "string",
                    "description": "Choose from available options",
                    "options": [
                        {"label": "Option 1", "value": "value1"},
                        {"label": "Option 2", "value": "value2"},
                    ],
                    "default": "value1",
                },
            },
            {
                "key": "INT_ENV_VAR",
                "input": {
                    "name": "Numeric Value",
                    "type": "number",
                    "description": "Enter a number",
                    "min": 1,
                    "max": 100,
                    "default": 50,
                },
            },
            {
                "key": "BOOL_ENV_VAR",
                "input": {
                    "type": "boolean",
                    "name": "Enable Feature",
                    "description": "Toggle this feature on/off",
                    "default": False,
                    "trueValue": "enabled",
                    "falseValue": "disabled",
                },
            },
        ],
    },
}

# RunPod's tests.json template, as published.
TESTS_TEMPLATE = {
    "tests": [
        {
            "name": "test_case_name",
            "input": {"param1": "value1", "param2": "value2"},
            "timeout": 10000,
        },
    ],
    "config": {
        "gpuTypeId": "NVIDIA GeForce RTX 4090",
        "gpuCount": 1,
        "env": [{"key": "TEST_ENV_VAR", "value": "test_value"}],
        "allowedCudaVersions": [
            "12.7",
            "12.6",
            "12.5",
            "12.4",
            "12.3",
            "12.2",
            "12.1",
            "12.0",
            "11.7",
        ],
    },
}

# The guide's other env examples: a Hugging Face input and an input whose default is FP16.
HF_INPUT = {
    "key": "HF_MODEL",
    "input": {
        "type": "huggingface",
        "name": "Hugging Face Model",
        "description": "Model organization/name as listed on Huggingface Hub",
        "default": "runwayml/stable-diffusion-v1-5",
        "required": True,
    },
}
PRECISION = {
    "key": "PRECISION",
    "input": {
        "name": "Model precision",
        "type": "string",
        "description": "The numerical precision for model inference",
        "options": [
            {"label": "Full Precision (FP32)", "value": "fp32"},
            {"label": "Half Precision (FP16)", "value": "fp16"},
            {"label": "8-bit Quantization", "value": "int8"},
        ],
        "default": "fp16",
    },
}


def hub(**config) -> str:
    """The template with `config` keys replaced (a None value removes the key)."""
    body = json.loads(json.dumps(HUB_TEMPLATE))
    for key, value in config.items():
        if value is None:
            body["config"].pop(key, None)
        else:
            body["config"][key] = value
    return json.dumps(body)


def test_the_documented_hub_template_parses_with_every_field():
    parsed = parse_hub(json.dumps(HUB_TEMPLATE))
    assert (parsed.title, parsed.category, parsed.type) == (
        "Your Tool's Name",
        "language",
        "serverless",
    )
    config = parsed.config
    assert (config.runsOn, config.gpuCount, config.containerDiskInGb) == ("GPU", 1, 20)
    assert config.endpoint_type == "QUEUE"
    assert config.gpu_ids() == (["RTX A4000"], ["NVIDIA GeForce RTX 4090"])
    assert [e.key for e in config.env][:2] == ["STATIC_ENV_VAR", "STRING_ENV_VAR"]
    assert config.input_of("INT_ENV_VAR").max == 100
    assert config.presets[0].defaults["BOOL_ENV_VAR"] is True


def test_the_documented_input_examples_parse():
    config = parse_hub(hub(env=[HF_INPUT, PRECISION], presets=[])).config
    assert config.input_of("HF_MODEL").required
    assert [o.value for o in config.input_of("PRECISION").options] == ["fp32", "fp16", "int8"]


def test_a_deployment_gets_fixed_values_defaults_and_a_presets_values_as_text():
    config = parse_hub(json.dumps(HUB_TEMPLATE)).config
    assert hub_env(config) == {
        "STATIC_ENV_VAR": "static_value",
        "STRING_ENV_VAR": "default value",
        "OPTION_ENV_VAR": "value1",
        "INT_ENV_VAR": "50",
        "BOOL_ENV_VAR": "disabled",
    }
    preset = hub_env(config, "Preset Name")
    assert (preset["STRING_ENV_VAR"], preset["INT_ENV_VAR"], preset["BOOL_ENV_VAR"]) == (
        "value1",
        "10",
        "enabled",
    )
    with pytest.raises(HubFileError, match=r"no preset 'Fast' \(presets: 'Preset Name'\)"):
        hub_env(config, "Fast")


def test_an_lb_listing_is_an_lb_endpoint():
    assert parse_hub(hub(endpointType="LB")).config.endpoint_type == "LB"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("{", r"^hub.json: not valid JSON at line 1 column 2: "),
        ("[]", r"^hub.json: must be a JSON object, not list$"),
        ('{"title": "t"}', r"^hub.json: description: required$"),
        (
            hub(runsOn="TPU"),
            r"^hub.json: config.runsOn: 'TPU' is not allowed; input should be 'GPU' or 'CPU'$",
        ),
        (hub(endpointType="QB"), r"^hub.json: config.endpointType: 'QB' is not allowed"),
        (
            hub(containerDiskInGb=0),
            r"^hub.json: config.containerDiskInGb: Input should be greater than 0$",
        ),
        (hub(gpuCount=None), r"^hub.json: config: gpuCount is required when runsOn is GPU$"),
        (hub(runsOn="CPU"), r"^hub.json: config: cpuFlavor is required when runsOn is CPU$"),
        (
            hub(allowedCudaVersions=["12"]),
            r"^hub.json: config.allowedCudaVersions\[0\]: String should match",
        ),
        (
            hub(env=[{"key": "A"}]),
            r"^hub.json: config.env\[0\]: A: give one of value \(fixed\) or input",
        ),
        (
            hub(env=[{"key": "A B", "value": "1"}]),
            r"^hub.json: config.env\[0\].key: String should match",
        ),
        (
            hub(env=[{"key": "A", "value": "1"}, {"key": "A", "value": "2"}]),
            r"^hub.json: config: env: A declared more than once$",
        ),
        (
            hub(env=[{"key": "A", "input": {"type": "text"}}]),
            r"^hub.json: config.env\[0\].input.type: 'text' is not allowed",
        ),
        (
            hub(env=[{"key": "N", "input": {"type": "number", "min": 5, "max": 1}}]),
            r"^hub.json: config.env\[0\].input: min 5 is above max 1$",
        ),
        (
            hub(env=[{"key": "N", "input": {"type": "number", "max": 10, "default": 11}}]),
            r"^hub.json: config.env\[0\].input: default: 11 is above max 10$",
        ),
        (
            hub(env=[{"key": "N", "input": {"type": "number", "default": "5"}}]),
            r"^hub.json: config.env\[0\].input: default: '5' is not a number$",
        ),
        (
            hub(env=[{"key": "S", "input": {"type": "string", "min": 1}}]),
            r"^hub.json: config.env\[0\].input: min and max are for number inputs only$",
        ),
        (
            hub(env=[{"key": "B", "input": {"type": "boolean", "default": "yes"}}]),
            r"^hub.json: config.env\[0\].input: default: 'yes' is not true or false$",
        ),
        (
            hub(env=[PRECISION | {"input": {**PRECISION["input"], "default": "fp64"}}]),
            r"^hub.json: config.env\[0\].input: default: 'fp64' is not one of the options "
            r"\(fp32, fp16, int8\)$",
        ),
        (
            hub(presets=[{"name": "x", "defaults": {"INT_ENV_VAR": 1000}}]),
            r"^hub.json: config: presets 'x': INT_ENV_VAR: 1000 is above max 100$",
        ),
    ],
)
def test_a_bad_hub_file_is_one_line_naming_the_field(text, error):
    with pytest.raises(HubFileError, match=error) as err:
        parse_hub(text)
    assert "\n" not in str(err.value)


def test_keys_runpod_does_not_document_are_ignored():
    body = {**HUB_TEMPLATE, "gpu": {"minVram": 48}, "ports": []}
    assert parse_hub(json.dumps(body)).title == "Your Tool's Name"


def test_the_documented_tests_template_parses_with_timeouts_in_milliseconds():
    tests = parse_tests(json.dumps(TESTS_TEMPLATE))
    assert [(t.name, t.timeout_s) for t in tests.tests] == [("test_case_name", 10.0)]
    assert tests.tests[0].input == {"param1": "value1", "param2": "value2"}
    assert tests.config.gpuCount == 1 and env_for_tests(tests) == {"TEST_ENV_VAR": "test_value"}


def test_a_test_without_a_timeout_gets_five_minutes():
    tests = parse_tests('{"tests": [{"name": "a", "input": {}}]}')
    assert tests.tests[0].timeout_s == 300 and tests.config is None and env_for_tests(tests) == {}


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({}, r"^tests.json: tests: required$"),
        ({"tests": []}, r"^tests.json: tests: List should have at least 1 item"),
        ({"tests": [{"name": "a"}]}, r"^tests.json: tests\[0\].input: required$"),
        (
            {"tests": [{"name": "a", "input": "x"}]},
            r"^tests.json: tests\[0\].input: Input should be a valid dictionary",
        ),
        (
            {"tests": [{"name": "a", "input": {}, "timeout": 0}]},
            r"^tests.json: tests\[0\].timeout: Input should be greater than 0$",
        ),
        (
            {"tests": [{"name": "a", "input": {}}, {"name": "a", "input": {}}]},
            r"^tests.json: test names must be unique: a repeated$",
        ),
        (
            {"tests": [{"name": "a", "input": {}}], "config": {"env": [{"key": "K"}]}},
            r"^tests.json: config.env\[0\].value: required$",
        ),
    ],
)
def test_a_bad_tests_file_is_one_line_naming_the_field(body, error):
    with pytest.raises(HubFileError, match=error):
        parse_tests(json.dumps(body))


def test_a_file_in_dot_runpod_overrides_the_one_at_the_root(tmp_path: Path):
    assert runpod_path(tmp_path, "hub.json") is None
    (tmp_path / "hub.json").write_text("{}")
    assert runpod_path(tmp_path, "hub.json") == tmp_path / "hub.json"
    (tmp_path / ".runpod").mkdir()
    (tmp_path / ".runpod" / "hub.json").write_text("{}")
    assert runpod_path(tmp_path, "hub.json") == tmp_path / ".runpod" / "hub.json"
    assert runpod_path(tmp_path, "Dockerfile") is None
