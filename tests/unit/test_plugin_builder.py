"""Registry images built by the plugin as the image builder, never as root (issue 26).

For a registry `--container-image` the plugin (slurmstepd, root) runs `sqshbuild build
--quiet --cache-dir CACHE REF` as the builder when the node has that account: its uid, gid
and supplementary groups, an environment built from nothing (PATH, HOME, USER, LOGNAME,
LANG: nothing of the job's, no LD_PRELOAD, no SQSHBUILD_*), in `/`. Exit status 3 (the
registry refused the builder) prints one line and runs the same command as the user with the
job's environment. The builder's name is read from /etc/squall/builder, bounded: a FIFO, a
link, a huge or garbage file is the default name with one line, never a hang or a crash
(spank/plugin/builder.c, image.c, through spank/plugin/tests/builder_probe.c).
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from plugin_probe import build_probe

BUILDER = "squall-test-bld"       # not the real default: other tests must not see a builder
BUILDER_GROUP = "squall-test-bgrp"
USER = "nobody"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
REF = "registry.example:5000/team/app:1"
FIX = ("using the default builder account squall-builder; make it a regular file of root's, "
       "writable only by root, naming the builder account (or none)")

pytestmark = pytest.mark.needs_root("accounts, setuid")


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Path:
    return build_probe(tmp_path_factory.mktemp("builder") / "builder_probe",
                       "builder_probe.c", "builder.c", "image.c", "filepolicy.c", "pinmemo.c",
                       "runcmd.c", "srunwatch.c")


def ensure_accounts() -> pwd.struct_passwd:
    """A system account with a supplementary group, made once (left for later runs)."""
    try:
        grp.getgrnam(BUILDER_GROUP)
    except KeyError:
        subprocess.run(["groupadd", "--system", BUILDER_GROUP], check=False)
    try:
        return pwd.getpwnam(BUILDER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                        "--home-dir", f"/var/lib/{BUILDER}", "--shell", "/usr/sbin/nologin",
                        "--groups", BUILDER_GROUP, BUILDER], check=False)
    return pwd.getpwnam(BUILDER)


@pytest.fixture(scope="module")
def builder() -> pwd.struct_passwd:
    return ensure_accounts()


def run(*argv: str | Path) -> dict[str, list[str]]:
    res = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=20,
                         check=True)
    out: dict[str, list[str]] = {}
    for line in res.stdout.splitlines():
        key, _, value = line.partition("=")
        out.setdefault(key, []).append(value)
    return out


def conf_file(path: Path, text: str | bytes) -> Path:
    if isinstance(text, str):
        text = text.encode()
    path.write_bytes(text)
    path.chmod(0o644)
    return path


def name_of(probe: Path, conf: Path) -> tuple[str, str, list[str]]:
    out = run(probe, "name", conf)
    return out["rc"][0], out["name"][0], out.get("note", [])


# -- the name, from /etc/squall/builder ------------------------------------------------------

def test_a_missing_file_is_the_default_name_in_silence(probe, tmp_path):
    assert name_of(probe, tmp_path / "builder") == ("1", "squall-builder", [])


def test_none_means_no_builder(probe, tmp_path):
    assert name_of(probe, conf_file(tmp_path / "b", "# site\nnone\n"))[0] == "0"


def test_the_first_word_of_the_first_non_comment_line(probe, tmp_path):
    conf = conf_file(tmp_path / "b", "# the builder\n\n   # indented comment\n"
                                     f"  {BUILDER}  trailing words\nother\n")
    assert name_of(probe, conf) == ("1", BUILDER, [])
    assert name_of(probe, conf_file(tmp_path / "c", "# only comments\n\n")) == (
        "1", "squall-builder", [])


@pytest.mark.parametrize("text", ["bad;name\n", "-rf\n", "x" * 40 + "\n", "caf\xe9\n",
                                  b"squall\x01builder\n", b"squall-\x00builder\n"])
def test_garbage_is_the_default_name_with_one_line(probe, tmp_path, text):
    conf = conf_file(tmp_path / "b", text)
    rc, name, note = name_of(probe, conf)
    assert (rc, name) == ("1", "squall-builder")
    assert len(note) == 1 and note[0].startswith(f"squall: warning: {conf} ") and \
        note[0].endswith(FIX), note


def test_a_fifo_is_never_opened(probe, tmp_path):
    fifo = tmp_path / "builder"
    os.mkfifo(fifo, 0o644)
    writer = subprocess.Popen(["sh", "-c", f"exec 3>'{fifo}'; echo opened"],
                              stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.2)
        assert name_of(probe, fifo) == ("1", "squall-builder", [
            f"squall: warning: {fifo} is a FIFO (named pipe), not a regular file: {FIX}"])
        time.sleep(0.2)
        assert writer.poll() is None, "the plugin opened the FIFO"
    finally:
        writer.kill()
        writer.communicate()


def test_a_link_a_directory_and_a_device_are_not_read(probe, tmp_path):
    good = conf_file(tmp_path / "good", f"{BUILDER}\n")
    for path, kind in [(tmp_path / "link", "a symbolic link"),
                       (tmp_path / "zero", "a symbolic link"),
                       (tmp_path / "dir", "a directory")]:
        if path.name == "link":
            path.symlink_to(good)
        elif path.name == "zero":
            path.symlink_to("/dev/zero")
        else:
            path.mkdir()
        assert name_of(probe, path) == ("1", "squall-builder", [
            f"squall: warning: {path} is {kind}, not a regular file: {FIX}"])


def test_an_oversized_file_is_not_read(probe, tmp_path):
    conf = conf_file(tmp_path / "b", f"{BUILDER}\n" + "#" * 10_000 + "\n")
    assert name_of(probe, conf) == ("1", "squall-builder", [
        f"squall: warning: {conf} is larger than 4096 bytes: {FIX}"])


def test_a_file_others_could_write_is_not_trusted(probe, tmp_path):
    conf = conf_file(tmp_path / "b", f"{BUILDER}\n")
    conf.chmod(0o666)
    rc, name, note = name_of(probe, conf)
    assert (rc, name) == ("1", "squall-builder") and "mode 0666" in note[0], note
    conf.chmod(0o644)
    os.chown(conf, pwd.getpwnam(USER).pw_uid, -1)
    rc, name, note = name_of(probe, conf)
    assert (rc, name) == ("1", "squall-builder") and "not root's alone" in note[0], note


# -- the account: cred and environment -------------------------------------------------------

def test_the_cred_is_the_accounts_uid_gid_and_groups(probe, builder):
    out = run(probe, "lookup", BUILDER)
    assert out["rc"] == ["1"]
    assert out["uid"] == [str(builder.pw_uid)] and out["gid"] == [str(builder.pw_gid)]
    groups = {int(g) for g in out["groups"][0].split(",")}
    assert groups == set(os.getgrouplist(BUILDER, builder.pw_gid))
    assert grp.getgrnam(BUILDER_GROUP).gr_gid in groups


def test_the_environment_is_built_from_nothing(probe, builder):
    env = {**os.environ, "LD_PRELOAD": "/tmp/evil.so", "PATH": "/tmp/evil:/usr/bin",
           "HOME": "/tmp/evil", "SQSHBUILD_CACHE": "/tmp/evil", "SQSHBUILD_BUILDER": "root"}
    res = subprocess.run([str(probe), "lookup", BUILDER], capture_output=True, text=True,
                         timeout=20, check=True, env=env)
    got = [line[4:] for line in res.stdout.splitlines() if line.startswith("env=")]
    assert got == [f"PATH={PATH}", f"HOME={builder.pw_dir}", f"USER={BUILDER}",
                   f"LOGNAME={BUILDER}", "LANG=C.UTF-8"]


def test_no_account_and_root_are_no_builder(probe):
    assert run(probe, "lookup", "squall-test-nosuch") == {"rc": ["0"]}
    out = run(probe, "lookup", "root")
    assert out["rc"] == ["0"] and "root's uid" in out["note"][0]


# -- the build: as the builder, then as the user on exit status 3 ----------------------------

@pytest.fixture
def world() -> Iterator[Path]:
    """A directory both the builder and the job user can reach (tmp_path is root's 0700)."""
    top = Path(tempfile.mkdtemp(prefix="squall-builder-test-", dir="/tmp"))
    top.chmod(0o755)
    (top / "rec").mkdir()
    (top / "rec").chmod(0o1777)
    (top / "rec" / "order").touch()
    (top / "rec" / "order").chmod(0o666)     # appended to by both accounts
    img = top / "img.sqsh"
    img.write_bytes(b"hsqs" + bytes(200))
    img.chmod(0o644)
    yield top
    shutil.rmtree(top)


def stand_in(top: Path, builder_uid: int, builder_exit: int) -> Path:
    """A sqshbuild that records who ran it and how; for the builder it fails with
    builder_exit (0: succeeds as for the user, printing the image's path)."""
    script = top / "sqshbuild"
    script.write_text(f"""#!/bin/sh
u=$(id -u)
rec={top}/rec/$u
{{ echo "gid=$(id -g)"; echo "groups=$(id -G)"; echo "cwd=$(pwd)"; echo "umask=$(umask)"
  for a in "$@"; do echo "arg=$a"; done; env | sed 's/^/env=/'; }} > "$rec"
echo "$u" >> {top}/rec/order
if [ "$u" = {builder_uid} ] && [ {builder_exit} != 0 ]; then
  echo "sqshbuild: error: unauthorized: the registry refused it" >&2; exit {builder_exit}
fi
echo {top}/img.sqsh
""")
    script.chmod(0o755)
    return script


def record(top: Path, uid: int) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in (top / "rec" / str(uid)).read_text().splitlines():
        key, _, value = line.partition("=")
        out.setdefault(key, []).append(value)
    return out


def order(top: Path) -> list[int]:
    path = top / "rec" / "order"
    return [int(x) for x in path.read_text().split()]


JOB_ENV = ["LD_PRELOAD=/nonexistent/evil.so", "PATH=/tmp/evil:/usr/bin:/bin", "HOME=/tmp/evil",
           "SQSHBUILD_CACHE=/tmp/evil-cache", "JOBVAR=1"]
# A job's own site rules: never passed to the build the plugin runs as the user.
SITE_RULES = ["SQSHBUILD_POLICY=/tmp/evil/policy.json",
              "SQSHBUILD_SITE_CONFIG=/tmp/evil/sqshbuild.toml"]


def resolve(probe: Path, conf: Path, script: Path, drop: int) -> dict[str, list[str]]:
    user = pwd.getpwnam(USER)
    return run(probe, "resolve", conf, script, "/fsx/squall/images", REF, str(user.pw_uid),
               str(user.pw_gid), str(drop), *JOB_ENV, *SITE_RULES)


@pytest.mark.parametrize("drop", [0, 1], ids=["as-root", "user-init-ids"])
def test_refused_to_the_builder_it_is_built_as_the_user(probe, builder, world, tmp_path,
                                                        drop):
    conf = conf_file(world / "builder", f"{BUILDER}\n")
    out = resolve(probe, conf, stand_in(world, builder.pw_uid, 3), drop)
    user = pwd.getpwnam(USER)
    assert out["rc"] == ["0"], out
    assert out["path"] == [f"{world}/img.sqsh"]
    # the builder's own reason, after what happens next
    assert out["note"] == [f"squall: the image builder may not pull {REF}; building it as "
                           "you, in your own cache (unauthorized: the registry refused it)"]
    assert order(world) == [builder.pw_uid, user.pw_uid]
    argv = ["build", "--quiet", "--cache-dir", "/fsx/squall/images", REF]
    b = record(world, builder.pw_uid)
    # the builder works for the job's user, and only as far as she may (deputy.py)
    assert b["arg"] == argv[:-1] + ["--for-user", USER, REF]
    assert b["cwd"] == ["/"] and b["gid"] == [str(builder.pw_gid)]
    assert set(b["groups"][0].split()) == {str(g) for g in
                                           os.getgrouplist(BUILDER, builder.pw_gid)}
    env = {e.split("=", 1)[0]: e.split("=", 1)[1] for e in b["env"]}
    env.pop("PWD", None)    # the shell's own
    env.pop("SHLVL", None)
    env.pop("_", None)
    env.pop("OLDPWD", None)
    assert env == {"PATH": PATH, "HOME": builder.pw_dir, "USER": BUILDER, "LOGNAME": BUILDER,
                   "LANG": "C.UTF-8"}
    u = record(world, user.pw_uid)
    assert u["arg"] == argv
    assert set(JOB_ENV) <= set(u["env"]), u["env"]
    assert not set(SITE_RULES) & set(u["env"]), u["env"]  # the site's policy stays in force


def test_built_by_the_builder_the_user_never_runs(probe, builder, world, tmp_path):
    conf = conf_file(world / "builder", f"# site\n{BUILDER}\n")
    out = resolve(probe, conf, stand_in(world, builder.pw_uid, 0), 1)
    assert out["rc"] == ["0"] and "note" not in out, out
    assert order(world) == [builder.pw_uid]


def test_any_other_failure_of_the_builder_is_one_line(probe, builder, world, tmp_path):
    conf = conf_file(world / "builder", f"{BUILDER}\n")
    out = resolve(probe, conf, stand_in(world, builder.pw_uid, 1), 1)
    assert out["rc"] == ["-1"] and "note" not in out
    assert out["err"] == [f"failed to import docker image: {REF}: sqshbuild failed "
                          "(exit status 1): "
                          "sqshbuild: error: unauthorized: the registry refused it"]
    assert order(world) == [builder.pw_uid]


@pytest.mark.parametrize("text", ["none\n", "squall-test-nosuch\n"])
def test_no_builder_builds_as_the_user_as_before(probe, builder, world, tmp_path, text):
    conf = conf_file(world / "builder", text)
    out = resolve(probe, conf, stand_in(world, builder.pw_uid, 3), 1)
    user = pwd.getpwnam(USER)
    assert out["rc"] == ["0"] and "note" not in out, out
    assert order(world) == [user.pw_uid]
    assert set(JOB_ENV) <= set(record(world, user.pw_uid)["env"])


def test_progress_lines_reach_the_step_while_sqshbuild_runs(probe, world, tmp_path,
                                                           monkeypatch):
    """The step's first node passes sqshbuild's progress lines on as they come (srun's
    stderr on a cluster), not when the build is over, and nothing else of its stderr."""
    script = world / "sqshbuild-slow"
    script.write_text(f"""#!/bin/sh
for a in "$@"; do echo "$a"; done > {world}/rec/progress-args
echo "sqshbuild: progress: node9 pulls {REF}: 1.0 MiB of 2.0 MiB, 1.0 MiB/s" >&2
echo "sqshbuild: a line that is not progress" >&2
sleep 2
echo "sqshbuild: progress: node9 squashes {REF}: 2.0 MiB written" >&2
sleep 1.5
echo {world}/img.sqsh
""")
    script.chmod(0o755)
    monkeypatch.setenv("PROBE_PROGRESS", "1")
    out = resolve(probe, conf_file(world / "builder", "none\n"), script, 0)
    assert out["rc"] == ["0"], out
    assert out["said"] == [f"progress: node9 pulls {REF}: 1.0 MiB of 2.0 MiB, 1.0 MiB/s",
                           f"progress: node9 squashes {REF}: 2.0 MiB written"], out
    first, second = (int(ms) for ms in out["ms"])
    assert first < 1900 and 2000 <= second < 3400, out   # said as they came, not at exit
    args = (world / "rec" / "progress-args").read_text().split()
    assert args[args.index("--progress-every") + 1] == "1", args
