"""Config parsing: defaults, bad values, error messages."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from modelops.config import PROJECT_ROOT, SETTINGS, Settings, load_settings, markdown_table
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
