"""The `enroot start --conf` file (spank/core/conf.c) and shell quoting (quote.c): every
value must come out of bash exactly as it went in, and nothing in it may run."""

import subprocess

import pytest

from squall.core import render_enroot_conf, shell_quote
from squall.errors import SquallError

HOSTILE = [
    "plain", "", "it's", "'", "''", "\\", "$HOME", "${HOME}", "$(touch {m})", "`touch {m}`",
    "\"double\"", "a;touch {m}", "a && touch {m}", "| touch {m}", "*", "?", "[a-z]", "~",
    "!!", "#comment", "%s %d", "-e", "--", "tab\there", "ünïcödé", "a'b'c'", "\\'",
    "'$(touch {m})'",
]


def bash(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script, "bash", *args], capture_output=True,
                          timeout=30, check=False)


def values(tmp_path):
    marker = tmp_path / "marker"
    return marker, [v.replace("{m}", str(marker)) for v in HOSTILE]


def test_shell_quote_round_trips_through_bash(tmp_path):
    marker, vals = values(tmp_path)
    for v in vals + ["multi\nline", "\x01\x7f"]:
        res = bash(f"printf '%s' {shell_quote(v)}")
        assert res.returncode == 0, res.stderr
        assert res.stdout.decode() == v
    assert not marker.exists()


def test_shell_quote_form():
    assert shell_quote("it's") == "'it'\\''s'"
    assert shell_quote("") == "''"
    assert shell_quote(b"\xff") == "'\udcff'"


def test_shell_quote_refuses_nul():
    with pytest.raises(SquallError, match="NUL byte at offset 1"):
        shell_quote("a\0b")


def write_conf(tmp_path, **kw) -> str:
    path = tmp_path / "conf"
    path.write_text(render_enroot_conf(**kw), encoding="utf-8", errors="surrogateescape")
    res = subprocess.run(["bash", "-n", str(path)], capture_output=True, timeout=30, check=False)
    assert res.returncode == 0, res.stderr
    return str(path)


def test_values_come_out_inert_and_exact(tmp_path):
    marker, vals = values(tmp_path)
    env = {f"V{i}": v for i, v in enumerate(vals)}
    fstab = [f"/src{i} /dst{i} none x-create=auto,rbind,{v}" for i, v in enumerate(vals)]
    hook = ["/usr/bin/printf", "<%s>\\n", *vals]
    conf = write_conf(tmp_path, env=env, mounts=fstab, hook_argv=hook)

    res = bash('source "$1"; environ', conf)
    assert res.returncode == 0, res.stderr
    assert res.stdout.decode().split("\n")[:-1] == [f"{k}={v}" for k, v in env.items()]

    res = bash('source "$1"; mounts', conf)
    assert res.stdout.decode().split("\n")[:-1] == fstab

    res = bash('source "$1"; hooks', conf)
    assert res.returncode == 0, res.stderr
    assert res.stdout.decode() == "".join(f"<{v}>\n" for v in vals)

    assert not marker.exists(), "a value was executed"


def test_sourcing_runs_nothing(tmp_path):
    marker, vals = values(tmp_path)
    conf = write_conf(tmp_path, env=[f"X={v}" for v in vals], mounts=[v for v in vals if v],
                      hook_argv=[f"touch {marker}"])
    res = bash('source "$1"', conf)
    assert res.returncode == 0 and res.stdout == b"" and res.stderr == b""
    assert not marker.exists()


def test_only_given_functions_are_defined(tmp_path):
    conf = write_conf(tmp_path, env={"A": "1"})
    res = bash('source "$1"; declare -F', conf)
    assert res.stdout.decode().split() == ["declare", "-f", "environ"]
    conf = write_conf(tmp_path, env={}, mounts=[])
    res = bash('source "$1"; environ; mounts', conf)
    assert res.returncode == 0 and res.stdout == b""


def test_non_utf8_bytes_survive(tmp_path):
    conf = write_conf(tmp_path, env=[b"B=\xff\xfe"], mounts=[b"/a\xff /b none rbind"])
    res = bash('source "$1"; environ; mounts', conf)
    assert res.stdout == b"B=\xff\xfe\n/a\xff /b none rbind\n"


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"env": ["A=1\nB=2"]}, "environ(): entry 0 'A=1\\nB=2' holds a newline"),
        ({"env": ["A=ok", "A=\r"]}, "environ(): entry 1"),
        ({"env": ["noequals"]}, "is not KEY=VALUE"),
        ({"env": ["1A=x"]}, "is not KEY=VALUE"),
        ({"env": ["A B=x"]}, "is not KEY=VALUE"),
        ({"env": [""]}, "environ(): entry 0 is empty"),
        ({"env": ["ENROOT_ROOTFS=/x"]}, "ENROOT_* variables are dropped"),
        ({"mounts": ["/a /b none rbind\n/etc /x none rbind"]}, "mounts(): entry 0"),
        ({"mounts": [""]}, "mounts(): entry 0 is empty"),
        ({"hook_argv": []}, "hooks(): no command"),
        ({"hook_argv": [""]}, "hooks(): no command"),
        ({"env": ["A=\0"]}, "NUL"),
        ({"hook_argv": ["/bin/x", "a\0b"]}, "NUL"),
    ],
)
def test_refusals_name_the_function_and_entry(kw, needle):
    with pytest.raises(SquallError) as exc:
        render_enroot_conf(**kw)
    assert needle in str(exc.value), str(exc.value)
    assert "\n" not in str(exc.value)


# --- Pyxis's way to skip the entrypoint: /etc/rc runs, rc.local is `exec "$@"` (item 2) ----

def run_hooks(tmp_path, conf: str, rootfs) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", 'set -e; source "$1"; hooks', "bash", conf],
                          capture_output=True, timeout=30, check=False,
                          env={"ENROOT_ROOTFS": str(rootfs), "PATH": "/usr/bin:/bin"})


def test_skip_entrypoint_overwrites_rc_local(tmp_path):
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc" / "rc.local").write_text("exec /entrypoint \"$@\"\n")
    conf = write_conf(tmp_path, skip_entrypoint=True)
    res = run_hooks(tmp_path, conf, rootfs)
    assert res.returncode == 0, res.stderr
    assert (rootfs / "etc" / "rc.local").read_text() == 'exec "$@"\n'
    # The image's /etc/rc sources it: the command runs as given, after `cd WORKDIR`.
    (rootfs / "etc" / "rc").write_text('cd /tmp\n. "$R/etc/rc.local"\n')
    out = subprocess.run(["sh", str(rootfs / "etc" / "rc"), "sh", "-c", "pwd; echo ran $0 $1",
                          "a", "b"], capture_output=True, text=True, timeout=30,
                         env={"R": str(rootfs), "PATH": "/usr/bin:/bin"}, check=False)
    assert out.stdout.split("\n")[:2] == ["/tmp", "ran a b"], out


def test_skip_entrypoint_never_writes_through_a_symlink(tmp_path):
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    outside = tmp_path / "host-rc.local"
    outside.write_text("host file\n")
    (rootfs / "etc" / "rc.local").symlink_to(outside)
    res = run_hooks(tmp_path, write_conf(tmp_path, skip_entrypoint=True), rootfs)
    assert res.returncode == 0, res.stderr
    assert outside.read_text() == "host file\n"
    assert not (rootfs / "etc" / "rc.local").is_symlink()


def test_skip_entrypoint_without_etc_does_nothing(tmp_path):
    rootfs = tmp_path / "bare"
    rootfs.mkdir()
    res = run_hooks(tmp_path, write_conf(tmp_path, skip_entrypoint=True), rootfs)
    assert res.returncode == 0, res.stderr
    assert list(rootfs.iterdir()) == []


def test_skip_entrypoint_then_the_hook_command(tmp_path):
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    conf = write_conf(tmp_path, skip_entrypoint=True,
                      hook_argv=["/bin/sh", "-c", 'cat "$ENROOT_ROOTFS/etc/rc.local"'])
    res = run_hooks(tmp_path, conf, rootfs)
    assert res.returncode == 0 and res.stdout == b'exec "$@"\n', res
    assert "hooks" not in subprocess.run(["bash", "-c", 'source "$1"; declare -F', "bash",
                                          write_conf(tmp_path, env={})],
                                         capture_output=True, text=True, check=False).stdout
