"""The package's floors and its freedom from import circles (the contracts in pyproject.toml).

The same check as ``lint-imports`` in ``make lint``, run here so that an import reaching up a floor,
or closing a circle, fails the unit tests too. Imports inside functions and under TYPE_CHECKING count.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from importlinter.cli import lint_imports

import modelops

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_package_checked_is_this_checkout() -> None:
    assert Path(modelops.__file__).resolve().parent == PYPROJECT.parent / "plugins" / "modelops"


def test_nothing_reaches_up_a_floor_and_no_imports_form_a_circle(capsys: pytest.CaptureFixture[str]) -> None:
    code = lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True)
    report = capsys.readouterr().out
    assert code == 0, f"import contracts broken (fix the import, or give the module its floor):\n{report}"
    assert "0 broken" in report
