"""Credentials against the real docker-registry: htpasswd Basic with a password that comes
from a command (Enroot's ``$(...)``), Bearer tokens through a ``docker-credential-*`` helper
(a test double of that protocol) and reused for the build, and secrets never printed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import (
    BASIC_PASSWORD,
    BASIC_USER,
    TOKEN_PASSWORD,
    TOKEN_USER,
    one_error_line,
    run_env,
    run_sqshbuild,
    write_credentials,
)
from imagekit import Image, layer
from sqfs import cat

pytestmark = pytest.mark.registry


def credential_helper_double(home: Path, server: str, user: str, secret: str) -> Path:
    """``docker-credential-test``: a test double of the docker-credential-helpers protocol
    (``get``: server URL on stdin, ``{"ServerURL","Username","Secret"}`` on stdout)."""
    bindir = home / "bin"
    bindir.mkdir(exist_ok=True)
    body = json.dumps({"ServerURL": server, "Username": user, "Secret": secret})
    script = bindir / "docker-credential-test"
    script.write_text("#!/bin/sh\n"
                      '[ "$1" = get ] || exit 2\n'
                      "read -r server\n"
                      f'echo "$server" >> {home}/helper.log\n'
                      f'if [ "$server" = "{server}" ]; then echo \'{body}\'; exit 0; fi\n'
                      "echo 'credentials not found in native keychain'; exit 1\n")
    script.chmod(0o755)
    return bindir


def test_basic_auth_password_from_commands(basic_registry, cache_dir, clean_env):
    basic_registry.pusher.push("team/cmd", "1", Image([layer(("file", "c", "cmd"))],
                                                      {"Cmd": ["x"]}))
    ref = f"{basic_registry.host}/team/cmd:1"
    pwfile = clean_env / "pw.txt"
    pwfile.write_text(BASIC_PASSWORD + "\n")
    write_credentials(clean_env, f"machine {basic_registry.host} login {BASIC_USER} password "
                                 f"$(cat {pwfile})\n")
    proc = run_sqshbuild(["-q", "--cache-dir", str(cache_dir), ref], run_env(clean_env))
    assert proc.returncode == 0, proc.stderr
    assert cat(Path(proc.stdout.strip()), "c") == "cmd"
    # printf with arguments: the whole rest of the line goes to the shell, as Enroot does
    head, tail = BASIC_PASSWORD[:5], BASIC_PASSWORD[5:]
    write_credentials(clean_env, f"machine {basic_registry.host} login {BASIC_USER} password "
                                 f"$(printf '%s%s' '{head}' '{tail}')\n")
    proc = run_sqshbuild(["-q", "--cache-dir", str(cache_dir / "b"), ref], run_env(clean_env))
    assert proc.returncode == 0, proc.stderr
    # a command that fails: the one error line names it, never what it printed (its
    # stderr may hold the secret)
    write_credentials(clean_env, f"machine {basic_registry.host} login {BASIC_USER} password "
                                 "$(echo 'sso session expired' >&2; exit 4)\n")
    err = one_error_line(run_sqshbuild(["--cache-dir", str(cache_dir / "c"), ref],
                                   run_env(clean_env)))
    assert "sso session expired" not in err and "line 1 of" in err and ".credentials" in err
    assert "printed no password" in err, err


def test_token_auth_through_a_credential_helper_reuses_the_token(token_registry, cache_dir,
                                                                 clean_env):
    image = Image([layer(("file", f"l{i}", str(i))) for i in range(4)], {"Cmd": ["x"]})
    token_registry.pusher.push("private/helped", "v1", image)
    ref = f"{token_registry.host}/private/helped:v1"
    bindir = credential_helper_double(clean_env, token_registry.host, TOKEN_USER,
                                      TOKEN_PASSWORD)
    (clean_env / ".docker").mkdir()
    (clean_env / ".docker" / "config.json").write_text(json.dumps(
        {"credHelpers": {token_registry.host: "test"}}))
    env = run_env(clean_env)
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    server = token_registry.extra["token_server"]
    before = len(server.requests)
    proc = run_sqshbuild(["-q", "--cache-dir", str(cache_dir), ref], env)
    assert proc.returncode == 0, proc.stderr
    assert cat(Path(proc.stdout.strip()), "l3") == "3"
    mine = [r for r in server.requests[before:] if r["scope"] == "repository:private/helped:pull"]
    # one token for the manifest, the config and four layers (not one per request)
    assert len(mine) == 1 and mine[0]["user"] == TOKEN_USER
    assert (clean_env / "helper.log").read_text().split() == [token_registry.host]


def test_a_secret_never_appears_in_output(token_registry, basic_registry, cache_dir,
                                          clean_env):
    secret = "wrong-Xq7-secret-that-must-not-leak"
    basic_registry.pusher.push("team/leak", "1", Image([layer(("file", "l", "l"))],
                                                       {"Cmd": ["x"]}))
    token_registry.pusher.push("private/leak", "1", Image([layer(("file", "l", "l"))],
                                                          {"Cmd": ["x"]}))
    write_credentials(clean_env, f"machine {basic_registry.host} login {BASIC_USER} password "
                                 f"$(printf '%s' '{secret}')\n")
    env = run_env(clean_env)
    for args in (["-v"], ["-vv"], ["--json"]):
        proc = run_sqshbuild(["build", *args, "--cache-dir", str(cache_dir),
                          f"{basic_registry.host}/team/leak:1"], env)
        assert proc.returncode == 3 and "auth refused" in proc.stderr  # refused: exit 3
        if args != ["-vv"]:  # -vv adds the traceback on purpose
            one_error_line(proc)
        assert secret not in proc.stdout + proc.stderr
    # the same secret from a credential helper, refused by a token server
    write_credentials(clean_env, "")
    bindir = credential_helper_double(clean_env, token_registry.host, TOKEN_USER, secret)
    (clean_env / ".docker").mkdir(exist_ok=True)
    (clean_env / ".docker" / "config.json").write_text(json.dumps({"credsStore": "test"}))
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    for args in (["-vv"], ["--json"]):
        proc = run_sqshbuild(["build", *args, "--cache-dir", str(cache_dir),
                          f"{token_registry.host}/private/leak:1"], env)
        assert proc.returncode == 3
        err = next(ln for ln in proc.stderr.splitlines() if ln.startswith("sqshbuild: error:"))
        assert "auth refused" in err and "docker-credential-test" in err, proc.stderr
        assert secret not in proc.stdout + proc.stderr


def test_a_credentials_file_others_can_read_gets_one_note(basic_registry, cache_dir,
                                                          clean_env):
    """One note on stderr naming the file and the fix, not an error; none with -q (no
    notes there, docs/cli.md) or once the file is private."""
    basic_registry.pusher.push("team/note", "1", Image([layer(("file", "n", "n"))],
                                                       {"Cmd": ["x"]}))
    ref = f"{basic_registry.host}/team/note:1"
    write_credentials(clean_env, f"machine {basic_registry.host} login {BASIC_USER} password "
                                 f"{BASIC_PASSWORD}\n")
    path = clean_env / ".config" / "enroot" / ".credentials"
    path.chmod(0o644)
    proc = run_sqshbuild(["--cache-dir", str(cache_dir), ref], run_env(clean_env))
    assert proc.returncode == 0, proc.stderr
    notes = [ln for ln in proc.stderr.splitlines() if "credentials file" in ln]
    assert notes == [f"sqshbuild: note: the credentials file {path} can be read by other "
                     f"users (mode 0644): chmod 600 {path}"], proc.stderr
    proc = run_sqshbuild(["-q", "--cache-dir", str(cache_dir / "q"), ref], run_env(clean_env))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    path.chmod(0o600)
    proc = run_sqshbuild(["--cache-dir", str(cache_dir / "p"), ref], run_env(clean_env))
    assert proc.returncode == 0 and "credentials file" not in proc.stderr, proc.stderr


def test_a_helper_that_prints_its_secret_and_fails_never_shows_it(token_registry, cache_dir,
                                                                  clean_env):
    secret = "helper-Xq7-secret-printed-then-exit-1"
    token_registry.pusher.push("private/leaky", "1", Image([layer(("file", "l", "l"))],
                                                           {"Cmd": ["x"]}))
    bindir = clean_env / "bin"
    bindir.mkdir()
    helper = bindir / "docker-credential-leaky"
    body = json.dumps({"ServerURL": token_registry.host, "Username": TOKEN_USER,
                       "Secret": secret})
    helper.write_text(f"#!/bin/sh\nread -r server\necho '{body}'\necho '{secret}' >&2\n"
                      "exit 1\n")
    helper.chmod(0o755)
    (clean_env / ".docker").mkdir()
    (clean_env / ".docker" / "config.json").write_text(json.dumps(
        {"credHelpers": {token_registry.host: "leaky"}}))
    env = run_env(clean_env)
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    for args in ([], ["-v"], ["-vv"], ["--json"]):
        proc = run_sqshbuild(["build", *args, "--cache-dir", str(cache_dir),
                          f"{token_registry.host}/private/leaky:1"], env)
        assert proc.returncode == 1, proc.stderr
        err = next(ln for ln in proc.stderr.splitlines() if ln.startswith("sqshbuild: error:"))
        assert "docker-credential-leaky" in err and "exit status 1" in err, proc.stderr
        assert secret not in proc.stdout + proc.stderr
