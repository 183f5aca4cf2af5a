"""No secret in any message (issue 19): what a credential helper or an Enroot password command
prints, on stdout or stderr, never appears in an error (the command and its exit status
only), and a credentials file other users can read gets one note naming it and the fix."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from squall.errors import SquallError
from squall.sqshbuild import credentials
from squall.sqshbuild.credentials import find_credentials

SECRET = "Zq81-helper-secret-never-print-me"


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("ENROOT_CONFIG_PATH", str(tmp_path / "enroot"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.delenv("NGC_API_KEY", raising=False)
    monkeypatch.delenv("SQSHBUILD_CREDENTIALS_TIMEOUT", raising=False)
    monkeypatch.setattr(credentials, "_NOTED", set(), raising=False)
    (tmp_path / "enroot").mkdir()
    (tmp_path / "docker").mkdir()
    return tmp_path


@pytest.fixture
def notes(caplog):
    """The records of the "squall" logger (the CLI's: it may not propagate to the root)."""
    logger = logging.getLogger("squall")
    old = logger.level, logger.propagate
    logger.addHandler(caplog.handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False  # caplog's handler is the root's too: each record once
    yield caplog
    logger.removeHandler(caplog.handler)
    logger.level, logger.propagate = old


def helper(home: Path, monkeypatch, body: str) -> None:
    """``docker-credential-leaky``, a helper that runs ``body`` (sh) for every request."""
    bindir = home / "bin"
    bindir.mkdir(exist_ok=True)
    path = bindir / "docker-credential-leaky"
    path.write_text(f"#!/bin/sh\nread -r server\n{body}\n")
    path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")


def private(path: Path, text: str, mode: int = 0o600) -> None:
    path.write_text(text)
    path.chmod(mode)


JSON = json.dumps({"ServerURL": "leaky.example", "Username": "u", "Secret": SECRET})


@pytest.mark.parametrize("config", [{"credHelpers": {"leaky.example": "leaky"}},
                                    {"credsStore": "leaky"}])
@pytest.mark.parametrize("body", [
    f"echo '{JSON}'; exit 1",  # prints its answer, then fails
    f"echo '{JSON}' >&2; exit 1",  # the same on stderr
    f"echo 'error: token {SECRET} expired'; echo '{SECRET}' >&2; exit 3",
])
def test_a_failing_helper_is_named_with_its_status_never_its_output(home, monkeypatch, body,
                                                                    config):
    helper(home, monkeypatch, body)
    private(home / "docker/config.json", json.dumps(config))
    with pytest.raises(SquallError) as info:
        _ = find_credentials("leaky.example").password
    msg = str(info.value)
    assert SECRET not in msg and "Secret" not in msg, msg
    assert "docker-credential-leaky" in msg and "exit status" in msg, msg
    assert str(home / "docker/config.json") in msg and "\n" not in msg


@pytest.mark.parametrize("command, why", [
    # the shell fails after printing: Enroot's "echo REST" gives the rest of the line to sh
    (f"$(echo {SECRET}; echo {SECRET} >&2) ; exit 3", "failed with exit status 3"),
    # the command fails: echo prints nothing (its status is echo's)
    (f"$(echo 'aws: the token {SECRET} expired' >&2; exit 255)", "printed no password"),
])
def test_a_failing_password_command_is_named_never_its_output(home, command, why):
    private(home / "enroot/.credentials",
            "machine other.example login x password y\n"
            f"machine cmd.example login u password {command}\n")
    with pytest.raises(SquallError) as info:
        _ = find_credentials("cmd.example").password
    msg = str(info.value)
    assert SECRET not in msg and "aws:" not in msg, msg
    assert f"the password command on line 2 of {home / 'enroot/.credentials'} {why}" in msg, msg
    assert "\n" not in msg


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604], ids=oct)
def test_a_credentials_file_others_can_read_gets_one_note(home, notes, mode):
    path = home / "enroot/.credentials"
    private(path, "machine a.example login u password pw\n", mode)
    assert find_credentials("a.example").password == "pw"
    assert find_credentials("a.example").password == "pw"  # one note per run, not per look
    lines = [r.getMessage() for r in notes.records]
    assert lines == [f"note: the credentials file {path} can be read by other users (mode "
                     f"{mode:04o}): chmod 600 {path}"], lines
    assert all(r.levelno == logging.WARNING for r in notes.records)


def test_a_private_credentials_file_gets_no_note(home, notes):
    private(home / "enroot/.credentials", "machine a.example login u password pw\n", 0o600)
    private(home / "docker/config.json", json.dumps({"auths": {"b.example": {
        "username": "u", "password": "pw"}}}), 0o400)
    assert find_credentials("a.example").password == "pw"
    assert find_credentials("b.example").password == "pw"
    assert notes.records == []


def test_a_docker_config_others_can_read_gets_a_note_when_it_holds_secrets(home, notes,
                                                                           monkeypatch):
    path = home / "docker/config.json"
    helper(home, monkeypatch, f"echo '{JSON}'")
    private(path, json.dumps({"credHelpers": {"leaky.example": "leaky"}}), 0o644)
    assert find_credentials("leaky.example").password == SECRET
    assert notes.records == []  # the names of helpers are no secret
    private(path, json.dumps({"auths": {"b.example": {"auth": "dTpwdw=="}}}), 0o644)
    assert find_credentials("b.example").password == "pw"
    assert [r.getMessage() for r in notes.records] == [
        f"note: the credentials file {path} can be read by other users (mode 0644): "
        f"chmod 600 {path}"]


def test_a_credentials_path_that_is_no_file_is_not_read(home):
    """A FIFO (or a directory) there is not opened for a blocking read."""
    os.mkfifo(home / "enroot/.credentials")
    (home / "docker/config.json").mkdir()
    assert find_credentials("a.example") is None
