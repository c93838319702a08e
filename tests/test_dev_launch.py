"""A dev-mode `templateId` as what each worker runs: handler file or worker command."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lockgate.dev.launch import launch_for
from lockgate.manage.controlplane import UnusableSettings

PY = "/opt/py/bin/python3"


@pytest.fixture
def base(tmp_path: Path) -> Path:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "handler.py").write_text("")
    (tmp_path / "my dir").mkdir()
    (tmp_path / "my dir" / "handler.py").write_text("")
    script = tmp_path / "worker.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    (tmp_path / "plain.sh").write_text("")  # not executable
    return tmp_path


def test_a_py_path_is_a_handler_run_by_our_python_in_its_folder(base: Path) -> None:
    launch = launch_for("app/handler.py", base_dir=base, python=PY)
    handler = base / "app" / "handler.py"
    assert launch.command == (PY, str(handler))
    assert (launch.cwd, launch.template_id) == (str(base / "app"), str(handler))


@pytest.mark.parametrize("template_id", ["my dir/handler.py", "'my dir/handler.py'"])
def test_a_handler_path_with_spaces_works_quoted_or_not(base: Path, template_id: str) -> None:
    launch = launch_for(template_id, base_dir=base, python=PY)
    assert launch.command == (PY, str(base / "my dir" / "handler.py"))


def test_an_absolute_handler_path_is_kept(base: Path) -> None:
    handler = str(base / "app" / "handler.py")
    assert launch_for(handler, base_dir=Path("/"), python=PY).template_id == handler


@pytest.mark.parametrize(
    ("template_id", "command"),
    [
        ("python -m mypkg.worker", (PY, "-m", "mypkg.worker")),
        ("python3 app/handler.py --flag", (PY, "app/handler.py", "--flag")),
        ("./worker.sh --fast", ("./worker.sh", "--fast")),
        ("sh -c 'exit 0'", ("sh", "-c", "exit 0")),
    ],
)
def test_anything_else_is_a_command_run_in_the_base_folder(
    base: Path, template_id: str, command: tuple[str, ...]
) -> None:
    launch = launch_for(f"  {template_id} ", base_dir=base, python=PY)
    assert (launch.command, launch.cwd, launch.template_id) == (command, str(base), template_id)


@pytest.mark.parametrize(
    ("template_id", "message"),
    [
        ("", "required in dev mode"),
        ("   ", "required in dev mode"),
        ("app/missing.py", "handler file"),
        ("no-such-program-xyz", "program 'no-such-program-xyz' not found"),
        ("./plain.sh", "program './plain.sh' not found"),
        ("python 'open", "cannot split"),
    ],
)
def test_a_template_id_that_cannot_run_is_refused_naming_the_field(
    base: Path, template_id: str, message: str
) -> None:
    with pytest.raises(UnusableSettings, match=r"^templateId: ") as err:
        launch_for(template_id, base_dir=base, python=sys.executable)
    assert message in str(err.value)
