"""Checks against the running production topology (`make compose-test`, marker ``compose``).

Deselected unless ``-m compose`` is given. Two places run them (docker/compose-test.sh):
- ``test_published.py`` on the host: what the host sees (the three published services, nothing else);
- the other modules inside a container of the project image on the compose network, like any platform
  service: ``MODELOPS_COMPOSE_CHECKS_ENV`` names an env file with the topology's settings (service
  names, the checks' own credentials), applied over what the root conftest set for the embedded stack.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from modelops.config import Settings


@pytest.hookimpl(trylast=True)  # after the root conftest, which points MODELOPS_* at the embedded stack
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "compose: runs against the docker compose topology (make compose-test)")
    checks_env = os.environ.get("MODELOPS_COMPOSE_CHECKS_ENV")
    if checks_env:
        from modelops.config import settings
        from modelops.deploy.preflight import parse_env_file

        os.environ.update(parse_env_file(Path(checks_env).read_text()))
        settings.cache_clear()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "compose" in (config.option.markexpr or ""):
        return
    here = Path(__file__).parent
    deselected = [item for item in items if here in Path(str(item.path)).parents]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item not in deselected]


def _in_network() -> None:
    if not os.environ.get("MODELOPS_COMPOSE_CHECKS_ENV"):
        pytest.fail("these checks run on the compose network: use `make compose-test` (docker/compose-test.sh)")


@pytest.fixture(scope="session")
def compose_settings() -> Settings:
    _in_network()
    from modelops.config import settings

    return settings()


@pytest.fixture(scope="session")
def object_store(compose_settings: Settings) -> object:
    from modelops.objectstore import ObjectStore

    return ObjectStore.from_settings(compose_settings)


@pytest.fixture(scope="session")
def mlflow_uri(compose_settings: Settings) -> str:
    return compose_settings.mlflow_uri


@pytest.fixture(scope="session")
def triton_url(compose_settings: Settings) -> str:
    return compose_settings.triton_http_url


@pytest.fixture(scope="session")
def airflow(compose_settings: Settings) -> object:
    from modelops.airflow_client import AirflowClient

    return AirflowClient(compose_settings.airflow_api_url, compose_settings.airflow_user,
                         compose_settings.airflow_password, timeout_s=60.0)
