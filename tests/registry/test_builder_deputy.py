"""The builder acts for a user only as far as that user may act (issue 39, deputy.py,
site.py): its credentials go only to the host and port they name and are never spent for
another user unless the site shares them; a cached image pulled with them is served only
where the site shares them; a registry of this node alone is never shared nor served
offline; the site file bounds an image and a user's share. Real docker-registry servers
on loopback; a trap server of the attacker's that records what it is sent."""

from __future__ import annotations

import http.server
import json
import os
import threading
from pathlib import Path

import pytest
from conftest import (
    BASIC_PASSWORD,
    BASIC_USER,
    one_error_line,
    run_env,
    run_sqshbuild,
    start_registry,
    write_credentials,
)
from imagekit import Image, layer

from squall.sqshbuild import site
from squall.sqshbuild.cache import open_shared
from squall.sqshbuild.credentials import find_credentials
from squall.sqshbuild.deputy import Deputy, node_local
from squall.sqshbuild.refs import parse_source
from squall.sqshbuild.registry import Refused, RegistryClient

pytestmark = pytest.mark.registry
SECRET = "builders-secret-pw-42"


def private_credentials(home: Path, text: str) -> None:
    write_credentials(home, text, 0o600)  # as Enroot wants them: no note about the mode


def site_file(tmp: Path, text: str) -> Path:
    path = tmp / "sqshbuild.toml"
    path.write_text(text)
    path.chmod(0o644)
    return path


class Trap:
    """The attacker's server: asks for Basic credentials and keeps every Authorization."""

    def __init__(self) -> None:
        seen = self.seen = []  # type: list[str]

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_GET(self):
                seen.append(self.headers.get("Authorization", ""))
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="trap"')
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()


def test_a_credential_line_is_for_its_own_host_and_port(clean_env):
    private_credentials(clean_env, "machine reg.example login a password pa\n"
                                 "machine reg.example:5000 login b password pb\n"
                                 "machine 127.0.0.1 login c password pc\n")
    assert find_credentials("reg.example").username == "a"
    assert find_credentials("reg.example:443").username == "a"  # the default port
    assert find_credentials("reg.example:5000").username == "b"
    assert find_credentials("reg.example:5001") is None  # was: a's, any port of the host
    assert find_credentials("127.0.0.1:5099") is None


def test_the_builders_password_never_reaches_a_trap_on_another_port(clean_env, cache_dir):
    """Enroot's own form names a host without a port; her trap listens on another port
    of that host (was: it logged the builder's password)."""
    private_credentials(clean_env, f"machine 127.0.0.1 login builder password {SECRET}\n")
    trap = Trap()
    try:
        proc = run_sqshbuild(["--cache-dir", str(cache_dir), f"{trap.host}/priv/app:1"],
                         run_env(clean_env))
    finally:
        trap.close()
    err = one_error_line(proc)
    assert "auth refused" in err and SECRET not in proc.stderr
    assert trap.seen and not any(trap.seen), trap.seen


def test_for_a_user_the_builder_asks_anonymously(basic_registry, clean_env, monkeypatch):
    """Credentials that would work are not spent for another user unless the site shares
    them for that repository."""
    basic_registry.pusher.push("priv/secret", "v1", Image([layer(("file", "s", "secret"))],
                                                          {"Cmd": ["x"]}))
    private_credentials(clean_env, f"machine {basic_registry.host} login {BASIC_USER} "
                                 f"password {BASIC_PASSWORD}\n")
    assert RegistryClient(basic_registry.host, "priv/secret").resolve("v1", "amd64").digest
    deputy = Deputy("alice", site.Site())
    why = deputy.anonymous(basic_registry.host, "priv/secret")
    assert "not shared" in why
    with pytest.raises(Refused, match="asked anonymously: the builder's credentials are "
                                      "not shared for 127.0.0.1"):
        RegistryClient(basic_registry.host, "priv/secret", anonymous=why).resolve("v1", "amd64")
    shared = Deputy("alice", site.Site(shared=(f"{basic_registry.host}/priv",)))
    assert shared.anonymous(basic_registry.host, "priv/secret") == ""
    assert shared.anonymous(basic_registry.host, "private/x") != ""  # a prefix of components


def test_a_cached_image_pulled_with_credentials_is_hers_only_where_shared(
        basic_registry, clean_env, tmp_path):
    basic_registry.pusher.push("priv/cached", "v1", Image([layer(("file", "c", "cached"))],
                                                          {"Cmd": ["x"]}))
    private_credentials(clean_env, f"machine {basic_registry.host} login {BASIC_USER} "
                                 f"password {BASIC_PASSWORD}\n")
    cache_dir = tmp_path / "shared"
    ref = f"{basic_registry.host}/priv/cached:v1"
    proc = run_sqshbuild(["--json", "--cache-dir", str(cache_dir), ref], run_env(clean_env))
    assert proc.returncode == 0, proc.stderr
    digest = json.loads(proc.stdout)["digest"]
    cache = open_shared(cache_dir)
    side = cache.read_sidecar(digest) or {}
    assert side["pulled_with_credentials"] == {"registry": basic_registry.host,
                                               "repository": "priv/cached"}
    src = parse_source(f"{basic_registry.host}/priv/cached@{digest}")
    with pytest.raises(Refused, match="pulled with credentials for 127.0.0.1"):
        Deputy("alice", site.Site()).check_hit(cache, src, digest, "")
    Deputy("alice", site.Site(shared=(basic_registry.host,))).check_hit(cache, src, digest, "")


def test_a_loopback_reference_is_never_built_into_the_shared_cache_for_a_user(
        registry, clean_env, cache_dir):
    registry.pusher.push("hers/app", "v1", Image([layer(("file", "h", "hers"))], {"Cmd": ["x"]}))
    proc = run_sqshbuild(["--cache-dir", str(cache_dir), "--for-user", "nobody",
                      f"{registry.host}/hers/app:v1"], run_env(clean_env))
    err = one_error_line(proc)
    assert proc.returncode == 3, proc.stderr  # the plugin builds it as the user
    assert "names a registry on this node only (127.0.0.1 is a loopback address)" in err
    assert not list(cache_dir.glob("sha256-*.sqsh"))
    assert node_local("localhost:5000") and node_local("[::1]:5000")
    assert node_local("169.254.169.254:80") and not node_local("nvcr.io")


def test_the_offline_fallback_never_serves_a_loopback_reference(tmp_path, clean_env,
                                                                  cache_dir):
    reg = start_registry(tmp_path / "reg")
    try:
        reg.pusher.push("hers/off", "v1", Image([layer(("file", "o", "off"))], {"Cmd": ["x"]}))
        ref = f"{reg.host}/hers/off:v1"
        assert run_sqshbuild(["-q", "--cache-dir", str(cache_dir), ref],
                         run_env(clean_env)).returncode == 0
    finally:
        reg.stop()
    proc = run_sqshbuild(["-q", "--cache-dir", str(cache_dir), ref], run_env(clean_env))
    err = one_error_line(proc)  # was: "using the cached image" for whatever listens there
    assert "registry unreachable" in err and "using the cached image" not in proc.stderr


def test_the_site_file_bounds_an_image_before_its_layers_are_fetched(registry, clean_env,
                                                                     cache_dir, tmp_path):
    registry.pusher.push("big/img", "v1", Image([layer(("file", "a", os.urandom(1 << 20)),
                                                       compress=False),
                                                 layer(("file", "b", os.urandom(1 << 20)),
                                                       compress=False)], {"Cmd": ["x"]}))
    conf = site_file(tmp_path, '[limits]\nmax_image_size = "1M"\n')
    env = {**run_env(clean_env), site.SITE_ENV: str(conf)}
    proc = run_sqshbuild(["--cache-dir", str(cache_dir), f"{registry.host}/big/img:v1"], env)
    err = one_error_line(proc)
    assert f"allowed by max_image_size in {conf}" in err, err
    assert not list((cache_dir / "layers" / "sha256").glob("*.tar"))
    # a variable lowers a bound, never raises it above the site's
    env["SQSHBUILD_MAX_IMAGE_SIZE"] = "100M"
    assert f"max_image_size in {conf}" in one_error_line(
        run_sqshbuild(["--cache-dir", str(cache_dir), f"{registry.host}/big/img:v1"], env))


@pytest.mark.parametrize("text,words", [
    ('[limits]\nmax_blob_size = "lots"\n', "limits.max_blob_size = 'lots' is not a size"),
    ('[limits]\nmax_blobs = "1G"\n', "limits.max_blobs is not a setting"),
    ('[credentials]\nshared = "nvcr.io"\n', "credentials.shared must be a list"),
    ('[limts]\n', "[limts] is not a section"),
    ("limits = [\n", "is not valid TOML"),
])
def test_a_bad_site_file_is_one_line_naming_the_key(registry, clean_env, cache_dir, tmp_path,
                                                     text, words):
    conf = site_file(tmp_path, text)
    proc = run_sqshbuild(["--cache-dir", str(cache_dir), f"{registry.host}/any/img:v1"],
                     {**run_env(clean_env), site.SITE_ENV: str(conf)})
    assert words in one_error_line(proc)


def test_a_site_file_others_may_write_is_refused(tmp_path):
    conf = site_file(tmp_path, "[limits]\n")
    conf.chmod(0o666)
    site._load.cache_clear()
    with pytest.raises(site.SquallError, match="may be written by others than root"):
        site._load(conf)


def test_a_users_share_refuses_what_would_go_past_it(tmp_path):
    cache = open_shared(tmp_path / "shared")
    src = parse_source("reg.example/team/img:1")
    deputy = Deputy("alice", site.Site(limits={"user_share": 15 << 20}))
    deputy.check_share(cache, 10 << 20, src)
    deputy.charge(cache, 10 << 20, "sha256:" + "1" * 64)
    deputy.check_share(cache, 4 << 20, src)
    with pytest.raises(Refused, match="has had 10 MiB of the 15 MiB allowed in 24 h"):
        deputy.check_share(cache, 6 << 20, src)
    Deputy("bob", deputy.site).check_share(cache, 6 << 20, src)  # each user her own
