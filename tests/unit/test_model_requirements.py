"""The dependency rule of python-backend models: a model's requirements.txt against the serving environment.

The files are what MLflow 3.17 writes (``mlflow.pyfunc.save_model`` of a ``PythonModel``,
``mlflow.sklearn.save_model``), checked against a fixed table of installed versions (pure) and, once,
against this environment through :mod:`importlib.metadata`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from modelops.errors import ContractError
from modelops.serving.model_requirements import (
    installed_version,
    python_problem,
    require_environment,
    requirement_problems,
)

# requirements.txt of a PythonModel and of a scikit-learn model, as mlflow.<flavor>.save_model wrote them
PYFUNC_TXT = "mlflow==3.17.2\ncloudpickle==3.1.3\nnumpy==1.26.4\npandas==2.3.3"
SKLEARN_TXT = ("mlflow==3.17.2\nnumpy==1.26.4\npandas==2.3.3\npsutil==7.2.2\nscikit-learn==1.9.1\nscipy==1.17.1\n"
               "skops==0.16.0")
INSTALLED = {"mlflow": "3.17.2", "cloudpickle": "3.1.3", "numpy": "1.26.4", "pandas": "2.3.3", "psutil": "7.2.2",
             "scikit-learn": "1.9.1", "scipy": "1.17.1", "skops": "0.16.0", "requests": "2.32.5",
             "fastapi": "0.118.0"}
REQUIRES = {"mlflow": ["requests<3,>=2.17.3", "fastapi<1; extra == \"server\"", "slowapi>=0.1; extra == \"genai\""]}


def _installed(table: dict[str, str]):  # type: ignore[no-untyped-def]
    return lambda name: table.get(name.lower().replace("_", "-"))


def _problems(text: str, table: dict[str, str] = INSTALLED) -> list[str]:
    return requirement_problems(text, _installed(table), lambda name: REQUIRES.get(name, []))


def test_what_mlflow_writes_is_met_by_the_same_versions() -> None:
    assert _problems(PYFUNC_TXT) == [] and _problems(SKLEARN_TXT) == []


def test_an_exact_pin_accepts_any_patch_release_of_its_minor_and_nothing_else() -> None:
    patched = {**INSTALLED, "mlflow": "3.17.0", "numpy": "1.26.0", "pandas": "2.2.3", "scikit-learn": "1.8.0"}
    assert _problems(PYFUNC_TXT, patched) == ["pandas==2.3.3: installed 2.2.3; an exact pin accepts any 2.3.* "
                                              "(patch releases)"]
    assert _problems(SKLEARN_TXT, patched)[-1] == ("scikit-learn==1.9.1: installed 1.8.0; an exact pin accepts any "
                                                   "1.9.* (patch releases)")
    assert _problems("mlflow==2.19.0") == ["mlflow==2.19.0: installed 3.17.2; an exact pin accepts any 2.19.* "
                                           "(patch releases)"]


def test_a_missing_package_is_named_and_other_specifiers_must_contain_the_installed_version() -> None:
    text = ("definitely-not-installed-pkg==1.0\n# a comment\n\nnumpy>=2  # needs numpy 2\nscikit_learn~=1.9.0\n"
            "pandas!=2.3.3\nnumpy==1.26.*\npywin32==306; sys_platform == 'win32'\n")
    assert _problems(text) == ["definitely-not-installed-pkg==1.0: not installed",
                               "numpy>=2: installed 1.26.4, outside >=2",
                               "pandas!=2.3.3: installed 2.3.3, outside !=2.3.3"]


def test_lines_that_cannot_be_checked_are_refused_and_extras_are_followed() -> None:
    text = "-r other.txt\nmypkg @ https://example.com/mypkg-1.0.whl\nmlflow[server]==3.17.2\nmlflow[genai]==3.17.2"
    problems = _problems(text)
    assert problems[0].startswith("line 1 '-r other.txt': not a package requirement (PEP 508)")
    assert problems[1].startswith("line 2 'mypkg @ https://example.com/mypkg-1.0.whl': a package from a URL")
    assert problems[2:] == ["mlflow[genai]==3.17.2: slowapi (of the extra [genai]) is not installed"]


def test_the_python_version_must_have_the_serving_minor() -> None:
    assert python_problem("3.11.7", (3, 11)) is None and python_problem(None, (3, 11)) is None
    assert python_problem("3.12.1", (3, 11)) == ("python 3.12.1: the serving environment runs Python 3.11; pickled "
                                                 "models do not cross minor versions (log the model with that Python)")


def test_the_real_environment_and_a_model_directory(tmp_path: Path) -> None:
    import mlflow

    assert installed_version("MLflow") == mlflow.__version__ == installed_version("mlflow")
    assert installed_version("scikit_learn") == installed_version("scikit-learn") is not None
    assert installed_version("definitely-not-installed-pkg") is None
    (tmp_path / "requirements.txt").write_text(f"mlflow=={mlflow.__version__}\ndefinitely-not-installed-pkg==1.0\n")
    (tmp_path / "python_env.yaml").write_text("python: 2.7.18\nbuild_dependencies: [pip]\n")
    with pytest.raises(ContractError, match=r"(?s)^model m \(pyfunc\): the serving environment .* does not meet the "
                                            r"model's requirements.txt:\n  definitely-not-installed-pkg==1.0: not "
                                            r"installed\n  python 2.7.18: the serving environment runs Python 3\.11"):
        require_environment(tmp_path, "model m (pyfunc)", {})
    (tmp_path / "requirements.txt").write_text(f"mlflow=={mlflow.__version__}\n")
    (tmp_path / "python_env.yaml").unlink()
    require_environment(tmp_path, "model m (pyfunc)", {"python_function": {"python_version": "3.11.2"}})
