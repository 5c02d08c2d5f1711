"""Can the serving environment run a python-backend model? Its declared requirements against what is installed.

A ``pyfunc`` model (and a ``triton`` model of the python backend) runs inside Triton's python backend,
in the serving environment: the embedded stack's Triton and the project image run the stub with the
platform's own environment (``PATH``), the one this check reads. No per-model environment is built
(Triton's ``EXECUTION_ENV_PATH`` packs need conda-pack and the package registries at publish time), so
a model that needs something the environment lacks is **refused before Triton**, naming every
package, instead of a load that fails later with an ``ImportError`` in Triton's log.

The rule (:func:`requirement_problems`), per line of the model's ``requirements.txt`` (what
``mlflow.<flavor>.log_model`` writes, from ``pip_requirements`` or its own inference):

* blank lines and ``#`` comments are skipped; a requirement whose environment marker is false here
  (``pywin32; sys_platform == "win32"``) is skipped;
* anything that is not a PEP 508 requirement (``-r other.txt``, ``--index-url``, a path or a bare URL)
  is refused: nothing can say whether it is met;
* the package must be installed (by its distribution name, normalized);
* an **exact pin** ``==X.Y.Z`` (MLflow pins every package it infers to the version it was logged with)
  is met by any installed ``X.Y.*``: patch releases only fix bugs, and the serving environment's
  numpy/pandas/scikit-learn/mlflow rarely match the training machine's to the last digit. ``mlflow``
  itself follows the same rule;
* every other specifier (``>=``, ``<``, ``~=``, ``!=``, ``==X.*``, ``===``) must contain the installed
  version exactly (PEP 440, pre-releases allowed);
* ``pkg[extra]``: the packages the extra adds (``pkg``'s own metadata) must be installed too;
* the Python the model was logged with (``python_env.yaml``'s ``python``, else the ``MLmodel``
  ``python_function`` ``python_version``) must have the serving interpreter's major.minor: pickled
  models do not cross minor versions reliably.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from modelops.errors import ContractError

REQUIREMENTS_FILE = "requirements.txt"
Installed = Callable[[str], str | None]
"""Distribution name → installed version, None when not installed."""
Requires = Callable[[str], list[str]]
"""Distribution name → its own requirement lines (``Requires-Dist``)."""


def _exact_pin(requirement: Requirement) -> Version | None:
    specs = list(requirement.specifier)
    if len(specs) != 1 or specs[0].operator != "==" or specs[0].version.endswith(".*"):
        return None
    try:
        return Version(specs[0].version)
    except InvalidVersion:
        return None


def _minor(version: Version) -> tuple[int, int]:
    release = (*version.release, 0, 0)
    return release[0], release[1]


def _version_problem(requirement: Requirement, installed: str) -> str | None:
    pin = _exact_pin(requirement)
    try:
        have = Version(installed)
    except InvalidVersion:
        return f"{requirement}: installed version {installed!r} is not a PEP 440 version"
    if pin is not None:
        if _minor(have) == _minor(pin):
            return None
        major, minor = _minor(pin)
        return f"{requirement}: installed {installed}; an exact pin accepts any {major}.{minor}.* (patch releases)"
    if requirement.specifier and not requirement.specifier.contains(have, prereleases=True):
        return f"{requirement}: installed {installed}, outside {requirement.specifier}"
    return None


def _extra_problems(requirement: Requirement, installed: Installed, requires: Requires) -> list[str]:
    problems = []
    for extra in sorted(requirement.extras):
        env: dict[str, str] = {**{k: str(v) for k, v in default_environment().items()}, "extra": extra}
        for line in requires(requirement.name):
            try:
                needed = Requirement(line)
            except InvalidRequirement:
                continue
            if needed.marker is None or "extra" not in str(needed.marker) or not needed.marker.evaluate(env):
                continue
            version = installed(needed.name)
            if version is None:
                problems.append(f"{requirement}: {needed.name} (of the extra [{extra}]) is not installed")
            elif needed.specifier and not needed.specifier.contains(version, prereleases=True):
                problems.append(f"{requirement}: {needed.name} (of the extra [{extra}]) installed {version}, "
                                f"outside {needed.specifier}")
    return problems


def requirement_problems(text: str, installed: Installed, requires: Requires | None = None) -> list[str]:
    """Each way the requirements ``text`` (a ``requirements.txt``) are not met here; empty when they are."""
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            problems.append(f"line {number} {line!r}: not a package requirement (PEP 508), so it cannot be checked; "
                            "list packages by name and version (example: scikit-learn==1.9.1)")
            continue
        if requirement.url:
            problems.append(f"line {number} {line!r}: a package from a URL cannot be checked against the serving "
                            "environment; name it by version (example: mypkg==1.2.0)")
            continue
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        version = installed(requirement.name)
        if version is None:
            problems.append(f"{requirement}: not installed")
            continue
        problem = _version_problem(requirement, version)
        if problem:
            problems.append(problem)
        if requires is not None:
            problems += _extra_problems(requirement, installed, requires)
    return problems


def python_problem(logged: str | None, running: tuple[int, int]) -> str | None:
    """The model's Python (``3.11.7``) against the serving interpreter's major.minor; None when they agree."""
    if not logged:
        return None
    try:
        release = _minor(Version(str(logged)))
    except InvalidVersion:
        return f"python {logged!r}: not a version (python_env.yaml)"
    if release == running:
        return None
    return (f"python {logged}: the serving environment runs Python {running[0]}.{running[1]}; pickled models "
            "do not cross minor versions (log the model with that Python)")


def installed_version(name: str) -> str | None:
    """The installed version of distribution ``name`` (any spelling: ``scikit_learn``), None when absent."""
    from importlib import metadata

    for candidate in dict.fromkeys((name, canonicalize_name(name), canonicalize_name(name).replace("-", "_"))):
        try:
            return metadata.version(candidate)
        except metadata.PackageNotFoundError:
            continue
    return None


def distribution_requires(name: str) -> list[str]:
    """``Requires-Dist`` lines of the installed distribution ``name`` (empty when absent)."""
    from importlib import metadata

    try:
        return list(metadata.requires(name) or [])
    except metadata.PackageNotFoundError:
        return []


def _logged_python(model_dir: Path, flavors: Mapping[str, Any]) -> str | None:
    import yaml

    env = model_dir / "python_env.yaml"
    if env.is_file():
        try:
            doc = yaml.safe_load(env.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ContractError(f"{env}: unreadable ({exc})") from exc
        if isinstance(doc, Mapping) and doc.get("python"):
            return str(doc["python"])
    conf = flavors.get("python_function")
    return str(conf["python_version"]) if isinstance(conf, Mapping) and conf.get("python_version") else None


def require_environment(model_dir: Path, what: str, flavors: Mapping[str, Any]) -> None:
    """Refuse, naming each package, a model whose declared requirements the serving environment does not meet.

    Args:
        model_dir: the MLflow model directory (its ``requirements.txt``, ``python_env.yaml``).
        what: how the model is named in the message (``model churn (pyfunc)``).
        flavors: the ``MLmodel``'s flavors (for the logged Python version).

    Raises:
        ContractError: the problems, one per line, and the way out.
    """
    path = model_dir / REQUIREMENTS_FILE
    try:
        text = path.read_text() if path.is_file() else ""
    except OSError as exc:
        raise ContractError(f"{what}: {path} unreadable ({exc})") from exc
    problems = requirement_problems(text, installed_version, distribution_requires)
    python = python_problem(_logged_python(model_dir, flavors), sys.version_info[:2])
    if python:
        problems.append(python)
    if problems:
        raise ContractError(f"{what}: the serving environment (Triton's python backend runs in it; no per-model "
                            f"environment is built) does not meet the model's {REQUIREMENTS_FILE}:\n  "
                            + "\n  ".join(problems)
                            + "\n  install them in the serving image, or log the model with pip_requirements the "
                            "serving environment meets (an exact pin X.Y.Z accepts any installed X.Y.*)")
