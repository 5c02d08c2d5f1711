"""The documentation site builds strictly, and the CLI tutorial's commands stay real.

Every ``modelops ...`` line of the tutorial's ```bash blocks is parsed by the real parser (a renamed
command or flag fails here); the lines that need no running stack are run for real.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from modelops.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorials" / "release-a-model.md"
# Commands that work without a stack, run for real (in this order: validate reads what requests wrote).
OFFLINE = ("modelops --help", "modelops config", "modelops config --markdown", "modelops example requests",
           "modelops contracts validate")


def _bash_lines() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", TUTORIAL.read_text(), flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def _modelops_lines() -> list[list[str]]:
    return [shlex.split(line, comments=True) for line in _bash_lines() if line.startswith("modelops")]


def test_the_tutorial_shows_commands() -> None:
    commands = _modelops_lines()
    assert len(commands) >= 15
    assert any(argv[:2] == ["release", "start"] for argv in (c[1:] for c in commands))


@pytest.mark.parametrize("argv", _modelops_lines(), ids=shlex.join)
def test_every_tutorial_command_parses(argv: list[str]) -> None:
    if argv[1:] == ["--help"]:
        return
    args = build_parser().parse_args(argv[1:])
    assert callable(args.func)


def test_offline_tutorial_commands_run(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), str(ROOT)])}
    ran = []
    for argv in _modelops_lines():
        if not shlex.join(argv).startswith(OFFLINE):
            continue
        done = subprocess.run([sys.executable, "-m", "modelops.cli", *argv[1:]], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{shlex.join(argv)}: {done.stdout}\n{done.stderr}"
        ran.append(argv[1])
    assert {"--help", "config", "example", "contracts"} <= set(ran)


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    if mkdocs is None:
        pytest.skip("mkdocs is not installed in this environment (pip install mkdocs mkdocs-material)")
    done = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
