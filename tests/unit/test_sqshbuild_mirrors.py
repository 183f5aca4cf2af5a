"""containers-registries.conf(5): which files, which [[registry]] table, rewriting, short
names, and one-line errors for a broken file."""

from __future__ import annotations

import pytest

from squall.errors import SquallError
from squall.sqshbuild import mirrors
from squall.sqshbuild.mirrors import endpoints, is_short_name, load, search_candidates
from squall.sqshbuild.refs import Source


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CONTAINERS_REGISTRIES_CONF", raising=False)
    monkeypatch.setattr(mirrors, "SYSTEM_CONF", tmp_path / "etc" / "registries.conf")
    (tmp_path / "etc" / "registries.conf.d").mkdir(parents=True)
    (tmp_path / "home" / ".config" / "containers" / "registries.conf.d").mkdir(parents=True)
    return tmp_path


CONF = """
unqualified-search-registries = ["docker.io"]

[[registry]]
prefix = "docker.io"
location = "docker.io"
[[registry.mirror]]
location = "login:5000"
insecure = true
[[registry.mirror]]
location = "digests.example/hub"
pull-from-mirror = "digest-only"

[[registry]]
prefix = "docker.io/library/secret"
location = "docker.io/library/secret"
blocked = true

[[registry]]
prefix = "*.corp.example"
location = "ignored.example"
insecure = true

[[registry]]
prefix = "quay.io/team"
location = "internal.example/quay-team"
"""


def test_prefix_rewrite_and_mirrors(home):
    (home / "etc" / "registries.conf").write_text(CONF)
    conf = load()
    eps = endpoints(conf, "registry-1.docker.io", "library/ubuntu")
    assert [(e.registry, e.repository, e.insecure, e.pull) for e in eps] == [
        ("login:5000", "library/ubuntu", True, "all"),
        ("digests.example", "hub/library/ubuntu", False, "digest-only"),
        ("registry-1.docker.io", "library/ubuntu", False, "all")]
    assert not eps[1].serves(False) and eps[1].serves(True)
    with pytest.raises(SquallError, match="blocked"):
        endpoints(conf, "registry-1.docker.io", "library/secret")
    assert endpoints(conf, "registry-1.docker.io", "library/secretive")[0].mirror
    # a wildcard keeps the host; its settings apply
    (ep,) = endpoints(conf, "git.corp.example", "a/b")
    assert (ep.registry, ep.repository, ep.insecure) == ("git.corp.example", "a/b", True)
    (ep,) = endpoints(conf, "quay.io", "team/app")
    assert (ep.registry, ep.repository) == ("internal.example", "quay-team/app")
    (ep,) = endpoints(conf, "quay.io", "teams/app")  # not a path-component prefix
    assert (ep.registry, ep.repository) == ("quay.io", "teams/app")


def test_files_home_wins_and_drop_ins_override(home, monkeypatch):
    (home / "etc" / "registries.conf").write_text(CONF)
    (home / "etc" / "registries.conf.d" / "50-search.conf").write_text(
        'unqualified-search-registries = ["quay.io", "docker.io"]\n')
    (home / "etc" / "registries.conf.d" / "README").write_text("not toml [")
    assert load().search == ["quay.io", "docker.io"]
    user = home / "home" / ".config" / "containers" / "registries.conf"
    user.write_text('unqualified-search-registries = ["mine.example"]\n')
    conf = load()
    assert conf.search == ["mine.example"] and conf.files == [str(user)]
    only = home / "only.conf"
    only.write_text("")
    monkeypatch.setenv("CONTAINERS_REGISTRIES_CONF", str(only))
    assert load().search is None and load().files == [str(only)]


@pytest.mark.parametrize("text,match", [
    ("[[registry]\n", "not valid TOML"),
    ("[[registry]]\ninsecure = true\n", "neither location nor prefix"),
    ('[[registry]]\nlocation = "a"\nblocked = "yes"\n', "true or false"),
    ('[[registry]]\nlocation = "a"\n[[registry.mirror]]\nlocation = "b"\n'
     'pull-from-mirror = "sometimes"\n', "pull-from-mirror must be one of"),
    ('unqualified-search-registries = "docker.io"\n', "must be a list"),
])
def test_broken_files_are_one_line(home, text, match):
    (home / "etc" / "registries.conf").write_text(text)
    with pytest.raises(SquallError, match=match) as info:
        load()
    assert "\n" not in str(info.value) and "registries.conf" in str(info.value)


def test_short_names():
    assert is_short_name("ubuntu:24.04") and is_short_name("team/app") and is_short_name("x")
    for full in ("docker.io/ubuntu", "login:5000/app", "localhost/app", "docker://ubuntu",
                 "docker://nvcr.io#nvidia/cuda", "a.b/c@sha256:" + "0" * 64):
        assert not is_short_name(full), full
    conf = mirrors.RegistriesConf(search=["login:5000", "docker.io"])
    src = Source("registry", "ubuntu:24.04", "registry-1.docker.io", "library/ubuntu", "24.04")
    assert [(c.registry, c.repository, c.tag) for c in search_candidates(src, conf)] == [
        ("login:5000", "ubuntu", "24.04"), ("registry-1.docker.io", "library/ubuntu", "24.04")]
    full = Source("registry", "docker.io/ubuntu", "registry-1.docker.io", "library/ubuntu")
    assert search_candidates(full, conf) == [full]
