"""Credentials lookup (Enroot netrc, Docker config, NGC key) and challenge parsing."""

from __future__ import annotations

import base64
import json

import pytest

from squall.errors import SquallError
from squall.sqshbuild.auth import find_credentials, parse_challenge


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("ENROOT_CONFIG_PATH", str(tmp_path / "enroot"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.delenv("NGC_API_KEY", raising=False)
    (tmp_path / "enroot").mkdir()
    (tmp_path / "docker").mkdir()
    return tmp_path


def test_enroot_netrc_with_env_expansion(home, monkeypatch):
    (home / "enroot/.credentials").write_text(
        "machine nvcr.io login $oauthtoken password $MY_KEY\n"
        "machine registry.example.com\n  login u1 password p1\n"
        "machine registry.example.com login u2 password p2\n")
    monkeypatch.setenv("MY_KEY", "abc")
    c = find_credentials("nvcr.io")
    assert (c.username, c.password) == ("$oauthtoken", "abc")
    assert find_credentials("registry.example.com:443").username == "u1"
    assert find_credentials("registry.example.com", "u2").password == "p2"
    assert find_credentials("registry.example.com", "nobody") is None


def test_docker_config(home):
    auth = base64.b64encode(b"dock:er:pw").decode()
    (home / "docker/config.json").write_text(json.dumps({"auths": {
        "https://index.docker.io/v1/": {"auth": auth},
        "127.0.0.1:5000": {"username": "x", "password": "y"}}}))
    c = find_credentials("registry-1.docker.io")
    assert (c.username, c.password) == ("dock", "er:pw")
    assert find_credentials("127.0.0.1:5000").password == "y"
    assert find_credentials("other.io") is None


def test_bad_docker_auth_is_a_clear_error(home):
    (home / "docker/config.json").write_text(json.dumps({"auths": {"r.io": {"auth": "%%%"}}}))
    with pytest.raises(SquallError, match="docker login"):
        find_credentials("r.io")


def test_ngc_api_key(home, monkeypatch):
    assert find_credentials("nvcr.io") is None
    monkeypatch.setenv("NGC_API_KEY", "nvapi-123")
    c = find_credentials("nvcr.io")
    assert (c.username, c.password) == ("$oauthtoken", "nvapi-123")
    assert find_credentials("ghcr.io") is None


def test_parse_challenge():
    c = parse_challenge('Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
                        'scope="repository:library/ubuntu:pull"')
    assert c.scheme == "bearer"
    assert c.params == {"realm": "https://auth.docker.io/token", "service": "registry.docker.io",
                        "scope": "repository:library/ubuntu:pull"}
    assert parse_challenge('Basic realm="x"').scheme == "basic"
    assert parse_challenge("") is None
