"""Credentials as Enroot and Docker read them: the Enroot file's ``$``-passwords evaluated by
the shell, Docker's credHelpers / credsStore through ``docker-credential-NAME get`` (a test
double of that protocol, a shell script on PATH), and secrets kept out of every message."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

import pytest

from squall.errors import SquallError
from squall.sqshbuild.credentials import find_credentials, redact

SECRET = "pw-Zq81-never-print-me"


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("ENROOT_CONFIG_PATH", str(tmp_path / "enroot"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.delenv("NGC_API_KEY", raising=False)
    monkeypatch.delenv("SQSHBUILD_CREDENTIALS_TIMEOUT", raising=False)
    (tmp_path / "enroot").mkdir()
    (tmp_path / "docker").mkdir()
    return tmp_path


def creds_file(home: Path, text: str) -> None:
    (home / "enroot/.credentials").write_text(text)


def test_password_from_a_command_as_enroot_evaluates_it(home, monkeypatch):
    (home / "token").write_text(SECRET + "\n")
    creds_file(home, f"machine a.example login AWS password $(cat {home}/token)\n"
                     "machine b.example login u password $(printf '%s-%s' left right)\n"
                     "machine c.example login u password ${C_PW}\n"
                     "machine d.example login u password literal$notexpanded\n")
    monkeypatch.setenv("C_PW", "from-env")
    assert find_credentials("a.example").password == SECRET
    assert find_credentials("b.example").password == "left-right"
    assert find_credentials("c.example").password == "from-env"
    # only a password that starts with $ is evaluated (Enroot: $6 ~ /^\$/)
    assert find_credentials("d.example").password == "literal$notexpanded"


def test_command_runs_only_for_the_registry_asked_for(home):
    marker = home / "ran"
    creds_file(home, f"machine other.example login u password $(touch {marker}; echo x)\n"
                     "machine mine.example login u password plain\n")
    assert find_credentials("mine.example").password == "plain"
    assert not marker.exists()
    c = find_credentials("other.example")
    assert not marker.exists()  # lazily: only when a registry asks for credentials
    assert c.password == "x" and marker.exists()


def test_failing_command_is_named_never_its_output(home):
    """Its stderr may hold the secret: the message names the line, never what it printed
    (tests/unit/test_sqshbuild_secrets.py has more)."""
    creds_file(home, "machine e.example login u password "
                     "$(echo 'aws: token expired, run aws sso login' >&2; exit 3)\n")
    with pytest.raises(SquallError) as info:
        _ = find_credentials("e.example").password
    msg = str(info.value)
    assert "token expired" not in msg and "line 1 of" in msg and ".credentials" in msg
    assert "printed no password: run it by hand" in msg and "\n" not in msg


def test_hanging_command_times_out(home, monkeypatch):
    monkeypatch.setenv("SQSHBUILD_CREDENTIALS_TIMEOUT", "1")
    creds_file(home, "machine f.example login u password $(sleep 30; echo late)\n")
    start = time.monotonic()
    with pytest.raises(SquallError, match="did not finish within 1 s"):
        _ = find_credentials("f.example").password
    assert time.monotonic() - start < 10


def _helper(home: Path, name: str, table: dict[str, tuple[str, str]]) -> Path:
    """A test double of a docker-credential-helpers binary (the 'get' verb)."""
    bindir = home / "bin"
    bindir.mkdir(exist_ok=True)
    lines = ["#!/bin/sh", '[ "$1" = get ] || exit 2', "read -r server",
             f'echo "$server" >> {home}/{name}.log', 'case "$server" in']
    for server, (user, secret) in table.items():
        body = json.dumps({"ServerURL": server, "Username": user, "Secret": secret})
        lines.append(f"  '{server}') echo '{body}' ;;")
    lines += ["  *) echo 'credentials not found in native keychain'; exit 1 ;;", "esac"]
    path = bindir / f"docker-credential-{name}"
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return bindir


def test_cred_helpers_and_creds_store(home, monkeypatch):
    bindir = _helper(home, "test", {"123.dkr.ecr.example:443": ("AWS", SECRET),
                                    "https://index.docker.io/v1/": ("hubuser", "hubpw")})
    _helper(home, "store", {"store.example": ("su", "sp")})
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    (home / "docker/config.json").write_text(json.dumps({
        "auths": {"store.example": {}, "plain.example": {
            "auth": base64.b64encode(b"pu:pp").decode()}},
        "credHelpers": {"123.dkr.ecr.example:443": "test", "registry-1.docker.io": "test"},
        "credsStore": "store"}))
    c = find_credentials("123.dkr.ecr.example:443")
    assert (c.username, c.password) == ("AWS", SECRET)
    assert SECRET not in repr(c) and SECRET not in str(c)
    c = find_credentials("registry-1.docker.io")  # Docker Hub is asked for by its v1 URL
    assert (c.username, c.password) == ("hubuser", "hubpw")
    assert (home / "test.log").read_text().splitlines()[-1] == "https://index.docker.io/v1/"
    c = find_credentials("store.example")
    assert (c.username, c.password) == ("su", "sp")
    # the store does not know it: the auths entry is used
    c = find_credentials("plain.example")
    assert (c.username, c.password) == ("pu", "pp")
    assert find_credentials("nowhere.example") is None


def test_enroot_file_wins_over_docker_config(home, monkeypatch):
    bindir = _helper(home, "test", {"both.example": ("docker", "d")})
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    creds_file(home, "machine both.example login enroot password e\n")
    (home / "docker/config.json").write_text(json.dumps({"credsStore": "test"}))
    assert find_credentials("both.example").username == "enroot"


def test_missing_or_broken_helper_is_one_clear_line(home, monkeypatch):
    bindir = home / "bin"
    bindir.mkdir()
    bad = bindir / "docker-credential-broken"
    bad.write_text("#!/bin/sh\necho 'keychain locked' >&2\nexit 5\n")
    bad.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}/usr/bin:/bin")
    (home / "docker/config.json").write_text(json.dumps({"credHelpers": {
        "gone.example": "absent", "bad.example": "broken"}}))
    with pytest.raises(SquallError, match="docker-credential-absent.*not found on PATH"):
        _ = find_credentials("gone.example").password
    with pytest.raises(SquallError, match="docker-credential-broken.*exit status 5") as info:
        _ = find_credentials("bad.example").password
    assert "keychain locked" not in str(info.value)  # what it printed is never quoted


def test_redact_removes_every_secret_seen():
    from squall.sqshbuild import credentials
    credentials.remember_secret("hunter2-secret")
    assert redact("auth failed for hunter2-secret!") == "auth failed for ***!"
