"""--container-save writes only where the job user decides (issue 26).

The image is exported into a fresh private directory with an unguessable name, made in the
target's checked directory and handed to the runtime as /proc/self/fd/3/..., then renamed
into place relative to that directory's descriptor. What another user plants there (a link
at the target, links at the temporary names the plugin used to pick, a file of theirs) is
never followed, written or replaced: one line names the path and the fix
(spank/plugin/save.c, through spank/plugin/tests/save_probe.c, run as root as the step's end
runs it).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from plugin_probe import build_probe

USER = "nobody"
OTHER = "squall-test-oth"
KEEP = "remove it or give another path (only a file of yours is replaced)"

pytestmark = pytest.mark.needs_root("accounts, setuid")


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Path:
    return build_probe(tmp_path_factory.mktemp("save") / "save_probe", "save_probe.c",
                       "save.c", "runcmd.c")


@pytest.fixture(scope="module")
def other() -> pwd.struct_passwd:
    """The attacker: another account (made once, left for later runs)."""
    try:
        return pwd.getpwnam(OTHER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                        "--shell", "/usr/sbin/nologin", OTHER], check=False)
    return pwd.getpwnam(OTHER)


@pytest.fixture
def user() -> pwd.struct_passwd:
    return pwd.getpwnam(USER)


@pytest.fixture
def top(user) -> Iterator[Path]:
    """shared/: a sticky directory every user writes (as /fsx/shared); mine/: the user's;
    victim: a file of the user's outside both, which an attacker wants overwritten."""
    top = Path(tempfile.mkdtemp(prefix="squall-save-test-", dir="/tmp"))
    top.chmod(0o755)
    (top / "shared").mkdir(mode=0o1777)
    (top / "shared").chmod(0o1777)
    (top / "mine").mkdir()
    os.chown(top / "mine", user.pw_uid, user.pw_gid)
    victim = top / "victim"
    victim.write_text("VICTIM\n")
    os.chown(victim, user.pw_uid, user.pw_gid)
    (top / "calls").touch()
    (top / "calls").chmod(0o666)
    enroot = top / "enroot"
    # Writes through whatever path it is given (as mksquashfs would), and says with what.
    enroot.write_text(f"""#!/bin/sh
[ "$1" = export ] || exit 2
shift; out=""
while [ $# -gt 1 ]; do case "$1" in -o) out=$2; shift ;; esac; shift; done
echo "$(id -u) $out" >> {top}/calls
[ "$1" != broken ] || {{ echo "enroot: error: No such container: broken" >&2; exit 1; }}
printf 'IMAGE-%s\\n' "$1" > "$out"
""")
    enroot.chmod(0o755)
    yield top
    shutil.rmtree(top)


def run(*argv: str | Path) -> dict[str, str]:
    res = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=20,
                         check=True)
    return dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)


def export(probe: Path, top: Path, target: Path, user: pwd.struct_passwd,
           name: str = "pyxis_7.0") -> dict[str, str]:
    return run(probe, "export", top / "enroot", name, target, str(user.pw_uid),
               str(user.pw_gid), "7", "0")


def check(probe: Path, target: Path, user: pwd.struct_passwd) -> dict[str, str]:
    return run(probe, "check", target, str(user.pw_uid), str(user.pw_gid))


def plant_link(path: Path, to: Path, owner: pwd.struct_passwd) -> None:
    path.symlink_to(to)
    os.lchown(path, owner.pw_uid, owner.pw_gid)


def test_saved_into_place_through_a_private_directory(probe, top, user):
    target = top / "shared" / "x.sqsh"
    assert export(probe, top, target, user) == {"rc": "0"}
    assert target.read_text() == "IMAGE-pyxis_7.0\n"
    st = target.lstat()
    assert st.st_uid == user.pw_uid and Path(target).is_file() and not target.is_symlink()
    assert os.listdir(top / "shared") == ["x.sqsh"], "a temporary name was left"
    uid, out = (top / "calls").read_text().split()
    assert uid == str(user.pw_uid) and out == "/proc/self/fd/3/image.sqsh"


def test_a_link_planted_at_the_target_is_never_followed_nor_replaced(probe, top, user, other):
    target = top / "shared" / "x.sqsh"
    plant_link(target, top / "victim", other)
    line = f"{target} exists and is a symbolic link, not a regular file: {KEEP}"
    assert check(probe, target, user) == {"rc": "-1", "err": f"--container-save={target}: {line}"}
    assert export(probe, top, target, user) == {"rc": "-1", "err": line}
    assert target.is_symlink() and os.readlink(target) == str(top / "victim")
    assert (top / "victim").read_text() == "VICTIM\n"
    assert (top / "calls").read_text() == "", "the runtime ran for a target it cannot write"


def test_links_planted_at_temporary_names_are_never_written(probe, top, user, other):
    shared = top / "shared"
    # The names the plugin used to pick (.BASE.squall-JOB.STEP.tmp), and near ones.
    planted = [shared / ".x.sqsh.squall-7.0.tmp", shared / ".x.sqsh.squall-7.1.tmp",
               shared / ".squall-save-7.0", shared / ".x.sqsh.tmp"]
    for p in planted:
        plant_link(p, top / "victim", other)
    target = shared / "x.sqsh"
    assert export(probe, top, target, user) == {"rc": "0"}
    assert (top / "victim").read_text() == "VICTIM\n"
    assert all(p.is_symlink() for p in planted)
    assert target.read_text() == "IMAGE-pyxis_7.0\n"
    assert sorted(os.listdir(shared)) == sorted([p.name for p in planted] + ["x.sqsh"])


def test_another_users_file_is_not_replaced(probe, top, user, other):
    for target in [top / "mine" / "x.sqsh", top / "shared" / "x.sqsh"]:
        target.write_text("THEIRS\n")
        os.chown(target, other.pw_uid, other.pw_gid)
        line = f"{target} exists and belongs to uid {other.pw_uid}, not to you: {KEEP}"
        assert check(probe, target, user)["err"] == f"--container-save={target}: {line}"
        assert export(probe, top, target, user) == {"rc": "-1", "err": line}
        assert target.read_text() == "THEIRS\n"
        assert target.stat().st_uid == other.pw_uid
        assert os.listdir(target.parent) == ["x.sqsh"]


def test_the_users_own_file_is_replaced(probe, top, user):
    target = top / "shared" / "x.sqsh"
    target.write_text("OLD\n")
    os.chown(target, user.pw_uid, user.pw_gid)
    assert check(probe, target, user) == {"rc": "0"}
    assert export(probe, top, target, user) == {"rc": "0"}
    assert target.read_text() == "IMAGE-pyxis_7.0\n"


def test_a_directory_every_user_writes_without_sticky_is_refused(probe, top, user):
    wide = top / "wide"
    wide.mkdir()
    wide.chmod(0o777)
    target = wide / "x.sqsh"
    want = (f"directory {wide} is writable by every user and not sticky (mode 0777): anyone "
            f"could replace the saved image; save into a directory of yours (or chmod +t "
            f"{wide})")
    assert check(probe, target, user) == {"rc": "-1",
                                          "err": f"--container-save={target}: {want}"}
    assert export(probe, top, target, user) == {"rc": "-1", "err": want}
    assert os.listdir(wide) == []


def test_a_failed_export_leaves_nothing_and_says_why(probe, top, user):
    target = top / "mine" / "x.sqsh"
    out = export(probe, top, target, user, name="broken")
    assert out == {"rc": "-1", "err": "enroot export failed (exit status 1): enroot: error: "
                                      "No such container: broken"}
    assert os.listdir(top / "mine") == []


def test_the_old_messages_stay(probe, top, user):
    missing = top / "nowhere" / "x.sqsh"
    assert check(probe, missing, user)["err"] == (
        f"--container-save={missing}: directory {top / 'nowhere'} does not exist on this "
        "node: create it first (the image is written there at the step's end)")
    root_dir = top / "rootdir"
    root_dir.mkdir(mode=0o755)
    assert check(probe, root_dir / "x.sqsh", user)["err"] == (
        f"--container-save={root_dir / 'x.sqsh'}: directory {root_dir} is not writable by the "
        "job user: pick a directory you can write")
    d = top / "mine" / "sub"
    d.mkdir()
    assert check(probe, d, user)["err"] == (
        f"--container-save={d}: {d} is a directory: give a file path (e.g. {d}/saved.sqsh)")
