"""Config parsing: defaults, bad values, error messages."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from modelops import config_rules
from modelops.config import (
    PROJECT_ROOT,
    SETTINGS,
    STACK_PORT_OFFSETS,
    Settings,
    load_settings,
    markdown_table,
    stack_port_env,
    value_of,
)
from modelops.errors import ConfigError


def test_defaults_without_any_variable() -> None:
    cfg = load_settings({})
    assert cfg.bind_host == "127.0.0.1"
    assert cfg.s3_port == 9310
    assert cfg.home == PROJECT_ROOT / ".modelops"
    assert cfg.s3_endpoint == "http://127.0.0.1:9310"
    assert cfg.mlflow_uri == "http://127.0.0.1:5510"
    assert cfg.triton_http_url == "http://127.0.0.1:8300"
    assert cfg.spark_master == "local[2]"
    assert cfg.notify_url_list == []


def test_every_setting_is_a_field_and_documented() -> None:
    assert [f.name for f in fields(Settings)] == [s.attr for s in SETTINGS]
    for setting in SETTINGS:
        assert setting.env.startswith("MODELOPS_")
        assert setting.doc.endswith(".")
        load_settings({setting.env: setting.example_value})  # the example itself is valid


def test_values_are_converted() -> None:
    cfg = load_settings({"MODELOPS_S3_PORT": "1234", "MODELOPS_HOME": "/tmp/x", "MODELOPS_SCORED_SAMPLE_SHARE": "0.25",
                         "MODELOPS_NOTIFY_URLS": "json://a/b, mailto://c"})
    assert cfg.s3_port == 1234
    assert cfg.home == Path("/tmp/x")
    assert cfg.sample_share == 0.25
    assert cfg.notify_url_list == ["json://a/b", "mailto://c"]


@pytest.mark.parametrize(
    ("variable", "value", "rule"),
    [
        ("MODELOPS_S3_PORT", "abc", "must be a TCP port between 1 and 65535"),
        ("MODELOPS_S3_PORT", "70000", "must be a TCP port between 1 and 65535"),
        ("MODELOPS_SCORED_SAMPLE_SHARE", "1.5", "must be a number between 0 and 1"),
        ("MODELOPS_TRITON_BACKEND", "tensorrt", "must be one of python, onnxruntime"),
        ("MODELOPS_MLFLOW_BACKEND", "mysql", "must be one of sqlite, postgresql"),
        ("MODELOPS_AIRFLOW_PARALLELISM", "0", "must be an integer >= 1"),
        ("MODELOPS_BUCKET", "Bad_Bucket", "must be an S3 bucket name"),
        ("MODELOPS_S3_ENDPOINT_URL", "minio:9000", "must be empty or a URL with a scheme"),
        ("MODELOPS_STARTUP_TIMEOUT_S", "-1", "must be a number > 0"),
    ],
)
def test_bad_values_name_the_variable_the_rule_and_an_example(variable: str, value: str, rule: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({variable: value})
    message = str(info.value)
    assert f"{variable}={value!r}" in message
    assert rule in message
    assert f"(example: {variable}=" in message


def test_all_bad_values_are_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"MODELOPS_S3_PORT": "x", "MODELOPS_MLFLOW_PORT": "y"})
    assert "MODELOPS_S3_PORT" in str(info.value) and "MODELOPS_MLFLOW_PORT" in str(info.value)


def test_secrets_are_not_echoed() -> None:
    # Secrets are free text; the only way to show one is `modelops config`, which hides it.
    from modelops.config_commands import _run

    class Args:
        markdown = False

    import contextlib
    import io
    import os

    os.environ["MODELOPS_S3_SECRET_KEY"] = "super-secret-value"
    try:
        from modelops.config import settings

        settings.cache_clear()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            _run(Args())  # type: ignore[arg-type]
    finally:
        del os.environ["MODELOPS_S3_SECRET_KEY"]
        settings.cache_clear()
    assert "super-secret-value" not in out.getvalue()
    assert "<hidden>" in out.getvalue()


def test_two_services_on_one_port_are_refused() -> None:
    with pytest.raises(ConfigError, match="MODELOPS_MLFLOW_PORT=9310: must differ from MODELOPS_S3_PORT"):
        load_settings({"MODELOPS_MLFLOW_PORT": "9310"})


def test_configuration_reference_table_is_generated_from_config() -> None:
    page = (PROJECT_ROOT / "docs" / "reference" / "configuration.md").read_text()
    assert markdown_table() in page, (
        "docs/reference/configuration.md's table is stale: paste `modelops config --markdown` between its markers")


def test_gateway_replicas_and_the_canary_metrics_source() -> None:
    default = load_settings({})
    assert default.gateway_url_list == (default.gateway_url,) and default.canary_metrics == "auto"
    cfg = load_settings({"MODELOPS_GATEWAY_URLS": " http://g1:8400/, http://g2:8400 ",
                         "MODELOPS_CANARY_METRICS": "prometheus", "MODELOPS_PROMETHEUS_URL": "http://p:9090"})
    assert cfg.gateway_url_list == ("http://g1:8400", "http://g2:8400")
    assert (cfg.canary_metrics, cfg.prometheus_url) == ("prometheus", "http://p:9090")
    with pytest.raises(ConfigError, match=r"MODELOPS_GATEWAY_URLS='g1:8400': .*not a URL.*example"):
        load_settings({"MODELOPS_GATEWAY_URLS": "g1:8400"})
    with pytest.raises(ConfigError, match=r"MODELOPS_PROMETHEUS_URL='': required when .*example"):
        load_settings({"MODELOPS_CANARY_METRICS": "prometheus"})


def test_every_setting_renders_to_text_that_parses_back() -> None:
    """What the stack hands its child processes reads back as the same settings."""
    cfg = load_settings({"MODELOPS_GATEWAY_URLS": "http://g1:8400,http://g2:8400"})
    rendered = {s.env: s.render(getattr(cfg, s.attr)) for s in SETTINGS}
    assert rendered["MODELOPS_GATEWAY_URLS"] == "http://g1:8400,http://g2:8400"
    assert load_settings(rendered) == cfg
    empty = load_settings({})
    assert load_settings({s.env: s.render(getattr(empty, s.attr)) for s in SETTINGS}) == empty


# Environment reads outside modelops.config, each with its reason; nothing else reads os.environ.
_ENV_READS_ELSEWHERE = {
    "plugins/modelops/gateway/options.py": "the serve command's options handed to uvicorn's workers",
    "plugins/modelops/spark.py": "Spark's and PySpark's own variables (SPARK_LOCAL_IP, PYSPARK_PYTHON)",
    "plugins/modelops/stack/airflow_stack.py": "PYTHONPATH passed on to Airflow's processes",
    "plugins/modelops/stack/services.py": "the whole environment copied for a child process",
    "plugins/modelops/deploy/preflight.py": "the deployment's secrets (.env), checked against .env.example",
    "plugins/modelops/deploy/db_roles.py": "the deployment's PostgreSQL passwords and libpq's PGHOST/PGPORT",
    "plugins/modelops/deploy/mlflow_users.py": "the deployment's MLflow passwords",
}
_ENV_READ = re.compile(r"""\bos\.environ\b|\bgetenv\(""")
_ENV_WRITE = re.compile(r"""^\s*os\.environ\[[^\]]+\]\s*=[^=]""")  # handing a value to child processes
_NAMED_READ = re.compile(r"""(?:environ(?:\.get|\.setdefault|\.pop)?\s*[\[(]|getenv\()\s*["'](\w+)["']""")


def _code_files() -> list[Path]:
    return sorted([*(PROJECT_ROOT / "plugins").rglob("*.py"), *(PROJECT_ROOT / "dags").rglob("*.py")])


def test_settings_are_declared_once_as_fields() -> None:
    """One declaration per setting: a field of Settings made by setting(); the table, env names and ports follow."""
    source = (PROJECT_ROOT / "plugins" / "modelops" / "config.py").read_text()
    for s in SETTINGS:
        assert len(re.findall(rf"^    {s.attr}: [^=]+ = setting\(", source, re.MULTILINE)) == 1, s.attr
        assert f'"{s.env}"' not in source or s.env != f"MODELOPS_{s.attr.upper()}", f"{s.env} spelt out again"
    ports = {s.env for s in SETTINGS if s.parse is config_rules.port}
    assert set(STACK_PORT_OFFSETS) == ports
    assert len(set(STACK_PORT_OFFSETS.values())) == len(ports), "two ports at one place in the stack layout"
    assert stack_port_env(24000)["MODELOPS_S3_PORT"] == "24310"


def test_no_declared_setting_is_read_from_the_environment_outside_config() -> None:
    declared = {s.env for s in SETTINGS}
    found = []
    for path in _code_files():
        if path.name == "config.py" and path.parent.name == "modelops":
            continue
        rel = path.relative_to(PROJECT_ROOT).as_posix()
        for number, line in enumerate(path.read_text().splitlines(), 1):
            stripped = line.strip()
            if stripped.startswith(("#", '"""')) or ("os." not in line and "getenv" not in line):
                continue
            named = set(_NAMED_READ.findall(line))
            if named & declared:
                found.append(f"{rel}:{number}: reads {sorted(named & declared)}; use modelops.config.settings()")
            elif _ENV_READ.search(line) and not _ENV_WRITE.match(line) and rel not in _ENV_READS_ELSEWHERE:
                found.append(f"{rel}:{number}: reads the environment; declare a setting in modelops.config")
    assert not found, "\n".join(found)


def test_the_grep_finds_a_read() -> None:
    """The check above can fail: a declared variable read directly is found."""
    assert _NAMED_READ.findall('x = os.environ.get("MODELOPS_S3_PORT", "9310")') == ["MODELOPS_S3_PORT"]
    assert _NAMED_READ.findall("os.getenv('MODELOPS_HOME')") == ["MODELOPS_HOME"]
    assert _ENV_READ.search("env = dict(os.environ)") and not _ENV_WRITE.match("env = dict(os.environ)")
    assert _ENV_WRITE.match("    os.environ[KEY] = value")  # a write, not a read


def test_a_single_setting_of_another_environment() -> None:
    assert value_of("bucket", {}) == "modelops"
    assert value_of("bucket", {"MODELOPS_BUCKET": "models"}) == "models"
    with pytest.raises(ConfigError, match=r"MODELOPS_BUCKET='Bad_Bucket': must be an S3 bucket name.*example"):
        value_of("bucket", {"MODELOPS_BUCKET": "Bad_Bucket"})
    assert load_settings({"MODELOPS_SPARK_DRIVER_MEMORY": "2G"}).spark_driver_memory == "2g"
    with pytest.raises(ConfigError, match=r"MODELOPS_SPARK_DRIVER_MEMORY='2GB': must be a memory size"):
        load_settings({"MODELOPS_SPARK_DRIVER_MEMORY": "2GB"})
