"""What dev mode reads of a Dockerfile: the image's command, its `pip install` lines, and
where COPY/ADD put each repository file (pure functions, a table each)."""

from __future__ import annotations

import pytest

from lockgate.dev.dockerfile import (
    image_command,
    instructions,
    pip_installs,
    python_args,
    repository_path,
    script_index,
)

# RunPod's worker-template layout: requirements copied to /, the src folder to the root.
TEMPLATE = """\
FROM runpod/base:0.6.2-cuda12.2.0
# Python dependencies
COPY requirements.txt /requirements.txt
RUN python3.11 -m pip install --upgrade pip && \\
    python3.11 -m pip install --upgrade -r /requirements.txt --no-cache-dir && \\
    rm /requirements.txt

ADD src .
CMD python3.11 -u /handler.py
"""

# A two-stage build; the final stage continues the first and runs an exec-form CMD.
STAGED = """\
FROM nvidia/cuda:12.1.0-base-ubuntu22.04 AS base
RUN --mount=type=cache,target=/root/.cache/pip pip install "torch>=2.1" 'numpy<2' \\
      --extra-index-url https://download.pytorch.org/whl/cu121 --target /opt/x
FROM base
WORKDIR /app
COPY builder/requirements.txt ./
RUN pip3 install -r requirements.txt
COPY src/ /app/src/
COPY *.json config/ ./
CMD ["python3", "-u", "src/rp_handler.py", "--model", "tiny"]
"""

FILES = {
    "requirements.txt",
    "src/handler.py",
    "src/util.py",
    "builder/requirements.txt",
    "src/rp_handler.py",
    "hub.json",
    "tests.json",
    "config/settings.yaml",
}
DIRS = {".", "src", "builder", "config"}


def test_the_template_runs_its_copied_handler_with_python():
    steps = instructions(TEMPLATE)
    assert [s.keyword for s in steps] == ["FROM", "COPY", "RUN", "ADD", "CMD"]
    args = python_args(image_command(steps))
    assert args == ["-u", "/handler.py"] and script_index(args) == 1
    assert repository_path("/handler.py", steps, FILES, DIRS) == "src/handler.py"


def test_the_template_installs_its_requirements_file_at_its_image_path():
    assert pip_installs(instructions(TEMPLATE)).words == ("pip", "-r", "/requirements.txt")


def test_a_final_stage_built_on_an_earlier_one_keeps_that_stages_installs():
    steps = instructions(STAGED)
    assert pip_installs(steps).words == (
        "torch>=2.1",
        "numpy<2",
        "--extra-index-url",
        "https://download.pytorch.org/whl/cu121",
        "-r",
        "/app/requirements.txt",
    )
    assert repository_path("/app/requirements.txt", steps, FILES, DIRS) == (
        "builder/requirements.txt"
    )


def test_an_exec_form_cmd_with_a_relative_script_maps_through_the_workdir():
    steps = instructions(STAGED)
    args = python_args(image_command(steps))
    assert args == ["-u", "src/rp_handler.py", "--model", "tiny"]
    assert repository_path("/app/src/rp_handler.py", steps, FILES, DIRS) == "src/rp_handler.py"
    assert repository_path("/app/hub.json", steps, FILES, DIRS) == "hub.json"  # a glob
    assert repository_path("/app/settings.yaml", steps, FILES, DIRS) == "config/settings.yaml"
    assert repository_path("/etc/passwd", steps, FILES, DIRS) is None


@pytest.mark.parametrize(
    ("dockerfile", "command"),
    [
        ('FROM x\nCMD ["python", "handler.py"]', ["python", "handler.py"]),
        (
            'FROM x\nENTRYPOINT ["python3", "-u"]\nCMD ["/handler.py"]',
            ["python3", "-u", "/handler.py"],
        ),
        ("FROM x\nENTRYPOINT python3 /a.py\nCMD ignored", ["python3", "/a.py"]),
        ('FROM x\nCMD ["sh", "-c", "exec python -u /h.py"]', ["python", "-u", "/h.py"]),
        ('FROM x\nCMD ["sh", "-c", "cd /x && python h.py"]', ["sh", "-c", "cd /x && python h.py"]),
        ("FROM x\nCMD a\nCMD b", ["b"]),
        ("FROM x", []),
    ],
)
def test_the_image_command_is_entrypoint_then_cmd_as_docker_runs_them(dockerfile, command):
    assert image_command(instructions(dockerfile)) == command


@pytest.mark.parametrize(
    ("words", "args", "script"),
    [
        (["python", "-u", "/handler.py"], ["-u", "/handler.py"], 1),
        (["/usr/bin/python3.11", "h.py", "--x"], ["h.py", "--x"], 0),
        (["/usr/bin/env", "python3", "h.py"], ["h.py"], 0),
        (["python", "-W", "ignore", "h.py"], ["-W", "ignore", "h.py"], 2),
        (["python", "-m", "worker"], ["-m", "worker"], None),
        (["/start.sh"], None, None),
        (["pythonic"], None, None),
    ],
)
def test_a_python_command_and_its_script_are_recognised(words, args, script):
    assert python_args(words) == args
    if args is not None:
        assert script_index(args) == script


@pytest.mark.parametrize(
    ("run", "words"),
    [
        ("pip install runpod==1.7.0", ("runpod==1.7.0",)),
        ("pip install --no-cache-dir -U runpod && pip cache purge", ("runpod",)),
        ("python -m pip install -q -r /r.txt -c /c.txt", ("-r", "/r.txt", "-c", "/c.txt")),
        ("uv pip install --system torch", ("torch",)),
        (
            "PIP_NO_CACHE=1 pip3 install --index-url=https://i/simple x",
            ("--index-url", "https://i/simple", "x"),
        ),
        ("apt-get install -y git; pip install --pre 'a[b]'", ("--pre", "a[b]")),
        ("pip uninstall -y x", ()),
        ('["pip", "install", "exec-form"]', ("exec-form",)),
    ],
)
def test_pip_install_lines_give_what_they_install_without_where_they_install_it(run, words):
    assert pip_installs(instructions(f"FROM x\nRUN {run}")).words == words
