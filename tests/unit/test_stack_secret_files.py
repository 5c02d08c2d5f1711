"""Secrets written by the stack are readable by their owner only."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from modelops import credentials
from modelops.config import load_settings
from modelops.secretfiles import generated_secret, write_private
from modelops.stack import airflow_stack


def test_the_airflow_password_file_is_written_0600_even_over_a_readable_one(tmp_path: Path) -> None:
    import airflow

    cfg = load_settings({"MODELOPS_HOME": str(tmp_path)})
    home = tmp_path / "airflow"
    home.mkdir()
    (home / ".migrated").write_text(airflow.__version__)  # already migrated: only the password file is written
    (home / "airflow.db").write_text("")
    passwords = home / "simple_auth_manager_passwords.json"
    passwords.write_text("{}")
    passwords.chmod(0o644)
    airflow_stack.airflow_migrate(cfg)
    assert stat.S_IMODE(passwords.stat().st_mode) == 0o600
    assert json.loads(passwords.read_text())[cfg.airflow_user] == credentials.airflow_password(cfg)
    secret = tmp_path / "secrets" / "airflow-admin-password"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600


def test_write_private_replaces_a_leftover_temporary_file_with_its_old_mode(tmp_path: Path) -> None:
    target = tmp_path / "token"
    leftover = tmp_path / "token.tmp"
    leftover.write_text("old")
    leftover.chmod(0o666)
    write_private(target, "new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert not leftover.exists()


def test_a_generated_secret_is_never_readable_by_others_even_under_umask_0(tmp_path: Path) -> None:
    import os

    from modelops.stack.seaweedfs import identities_file, write_identities

    old = os.umask(0)
    try:
        value = generated_secret(tmp_path / "secrets" / "token")
        cfg = load_settings({"MODELOPS_HOME": str(tmp_path)})
        write_identities(cfg)
    finally:
        os.umask(old)
    assert value and generated_secret(tmp_path / "secrets" / "token") == value  # created once
    for path in (tmp_path / "secrets" / "token", identities_file(cfg)):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
