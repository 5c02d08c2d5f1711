"""One rule for model names, refused at each entrance with the field, the rule and an example."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from modelops.errors import ConfigError, ContractError
from modelops.names import MODEL_NAME_PATTERN, check_model_name, cli_model_name

GOOD = ["recommender", "r", "rec_v2", "a" * 64, "canarym_835a9df9"]
BAD: list[Any] = ["", "Recommender", "rec-v2", "rec.v2", "2rec", "_rec", "a" * 65, "rec/../x", "rec v2", "réc",
                  "rec\n", None, 7]


@pytest.mark.parametrize("name", GOOD)
def test_good_names_pass(name: str) -> None:
    assert check_model_name(name) == name


@pytest.mark.parametrize("name", BAD)
def test_bad_names_are_refused_naming_field_rule_and_example(name: Any) -> None:
    with pytest.raises(ConfigError) as info:
        check_model_name(name, "model_name")
    text = str(info.value)
    assert text.startswith("model_name=") and MODEL_NAME_PATTERN in text and "example: recommender" in text


def test_cli_entrance() -> None:
    from modelops.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["release", "start", "--model", "rec_v2", "--version", "3"]).model == "rec_v2"
    with pytest.raises(argparse.ArgumentTypeError, match=r"--model='Rec-2'"):
        cli_model_name("Rec-2")
    with pytest.raises(SystemExit):
        parser.parse_args(["release", "start", "--model", "Rec-2", "--version", "3"])
    with pytest.raises(SystemExit):
        parser.parse_args(["traffic", "--model", "../etc"])
    # Triton's own commands and registration take the same rule (the name becomes a folder and keys).
    for argv in (["publish", "--model", "Rec", "--version", "1"], ["publish", "--model", "rec", "--version", "1",
                 "--triton-name", "rec-x"], ["load", "--model", "a/b", "--triton-version", "1"],
                 ["unload", "--model", "1rec", "--triton-version", "1"], ["served", "--model", ""],
                 ["example", "train", "--register", "Rec.v2"]):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
    assert parser.parse_args(["served", "--model", "rec_v2"]).model == "rec_v2"
    assert parser.parse_args(["example", "train", "--register", "rec_v2"]).register == "rec_v2"


def test_dag_param_entrance() -> None:
    import re

    from airflow.sdk import Param

    for module, field in (("model_release", "model"), ("model_release_control", "model"),
                          ("train_and_register", "model_name")):
        params = __import__(f"dags.{module}", fromlist=["PARAMS"]).PARAMS
        param: Param = params[field]
        assert param.schema["pattern"] == MODEL_NAME_PATTERN, module
        assert re.search(MODEL_NAME_PATTERN, "recommender") and not re.search(MODEL_NAME_PATTERN, "Rec-2")
        with pytest.raises(Exception, match="does not match"):
            param.resolve("Rec-2")


def test_routes_entrance() -> None:
    from modelops.documents.routes import model_from_key, parse_routes, routes_key

    doc = {"schema_version": 1, "model": "Rec-2", "revision": 1, "stable": {"version": 1, "sha256": "a" * 64},
           "canary": None, "canary_weight": 0.0}
    with pytest.raises(ContractError, match=r"routes\.model='Rec-2'.*example: recommender"):
        parse_routes(doc)
    with pytest.raises(ConfigError, match=r"model='\.\./x'"):
        routes_key("../x")
    assert model_from_key("routes/Rec-2.json") is None and model_from_key("routes/rec_2.json") == "rec_2"


def test_triton_folder_and_object_key_entrances() -> None:
    from modelops.canary.adapters import checkpoint_key
    from modelops.serving.pbtxt import pipeline_specs, step_names

    assert step_names("rec")["preprocess"] == "rec_preprocess"
    with pytest.raises(ConfigError, match="model="):
        pipeline_specs("rec-v2", backend="python")
    with pytest.raises(ConfigError, match="model="):
        checkpoint_key("Rec", 3)


def test_mlflow_registration_entrance_refuses_before_calling_mlflow() -> None:
    from modelops.registry.mlflow_registry import MlflowRegistry

    class Unreachable:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError("MLflow must not be called with a bad name")

    registry = MlflowRegistry.__new__(MlflowRegistry)
    registry.__dict__["client"] = Unreachable()
    with pytest.raises(ConfigError, match=r"name='Rec\.v2'"):
        registry.register("runs:/0123456789abcdef0123456789abcdef/model", "Rec.v2")
