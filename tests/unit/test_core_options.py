"""Container flags, their precedence and the flag table (spank/core/options.c) via cffi."""

import pytest

from squall.core import (
    check_container_option,
    container_flags,
    parse_container_name,
    resolve_step_options,
)
from squall.errors import SquallError

PYXIS_FLAGS = {
    "container-image", "container-mounts", "container-workdir", "container-name",
    "container-save", "container-mount-home", "no-container-mount-home",
    "container-remap-root", "no-container-remap-root", "container-entrypoint",
    "no-container-entrypoint", "container-entrypoint-log", "container-writable",
    "container-readonly", "container-env", "container-unshare",
}


def test_flag_table_holds_pyxis_flags_and_ours():
    flags = {f.name: f for f in container_flags()}
    assert PYXIS_FLAGS <= set(flags)
    assert {"container-efa", "container-nccl-debug", "container-log", "container-reuse",
            "no-container-reuse"} <= set(flags)
    assert [f.id for f in container_flags()] == list(range(len(flags)))
    for f in flags.values():
        assert f.help and "\n" not in f.help
        assert (f.arg_info is None) == (f.has_arg == 0), f.name
    assert flags["container-image"].has_arg == 1
    assert flags["container-writable"].has_arg == 0
    assert flags["container-nccl-debug"].has_arg == 2


def test_environment_names():
    flags = {f.name: f for f in container_flags()}
    assert flags["container-mount-home"].env_name() == "SQUALL_CONTAINER_MOUNT_HOME"
    assert flags["no-container-mount-home"].env_name("PYXIS_") == "PYXIS_CONTAINER_NO_MOUNT_HOME"
    assert flags["container-entrypoint-log"].env_name() == "SQUALL_CONTAINER_ENTRYPOINT_LOG"


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("container-image", "ubuntu:24.04"),
        ("--container-image", "/fsx/img.sqsh"),
        ("container-mounts", "/a:/b:ro,tmpfs:/t"),
        ("container-workdir", "/workspace"),
        ("container-name", "train:no_exec"),
        ("container-save", "/fsx/out.sqsh"),
        ("container-mount-home", None),
        ("no-container-remap-root", None),
        ("container-writable", None),
        ("container-env", "NCCL_DEBUG,HOME"),
        ("container-efa", "require"),
        ("container-nccl-debug", None),
        ("container-nccl-debug", "trace"),
        ("container-log", "verbose"),
        ("container-workdir", "relative/dir"),
        ("container-workdir", "../"),
        ("container-unshare", "net"),
        ("container-unshare", "net,ipc,uts"),
        ("container-unshare", "uts,net,net"),
    ],
)
def test_valid_values(flag, value):
    check_container_option(flag, value)


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("container-image", None, "--container-image: needs a value"),
        ("container-image", "Bad:tag", "--container-image: 'Bad:tag': repository 'Bad'"),
        ("container-mounts", "/a:/b:zz", "--container-mounts: '/a:/b:zz': unknown mount flag"),
        ("container-unshare", "foo", "--container-unshare: unknown namespace 'foo' (use net, "
         "ipc or uts"),
        ("container-unshare", "net,foo", "--container-unshare: unknown namespace 'foo'"),
        ("container-unshare", "net,,ipc", "--container-unshare: 'net,,ipc': empty namespace"),
        ("container-unshare", "", "--container-unshare: empty value"),
        ("container-unshare", "pid", "unknown namespace 'pid'"),
        ("container-workdir", "/a\nb", "--container-workdir: '/a\\nb' holds a control"),
        ("container-workdir", "/" + "w" * 5000, "--container-workdir: value is 5001 bytes"),
        ("container-name", "x:bogus", "--container-name: 'x:bogus': unknown flag 'bogus'"),
        ("container-name", "x:", "unknown flag ''"),
        ("container-name", ":exec", "--container-name: ':exec': empty name"),
        ("container-name", "a/b", "may only hold letters"),
        ("container-name", "../x", "must start with a letter or digit"),
        ("container-name", "n" * 129, "limit is 128"),
        ("container-save", "/fsx/dir/", "names a directory"),
        ("container-save", "", "--container-save: empty value"),
        ("container-env", "A,,B", "--container-env: 'A,,B': empty name"),
        ("container-env", "1A", "--container-env: '1A' is not a variable name"),
        ("container-env", "A-B", "is not a variable name"),
        ("container-efa", "maybe", "--container-efa: 'maybe' is not an EFA mode"),
        ("container-nccl-debug", "LOUD", "--container-nccl-debug: 'LOUD' is not an NCCL_DEBUG"),
        ("container-log", "debug", "--container-log: 'debug' is not a log level"),
        ("container-writable", "perhaps", "--container-writable: 'perhaps' is not a boolean"),
        ("container-bogus", "x", "unknown container option 'container-bogus'"),
    ],
)
def test_bad_values_name_the_flag(flag, value, needle):
    with pytest.raises(SquallError) as exc:
        check_container_option(flag, value)
    assert needle in str(exc.value), str(exc.value)


def test_non_utf8_value_refused():
    with pytest.raises(SquallError, match="--container-workdir: .*not valid UTF-8"):
        check_container_option("container-workdir", b"/w\xfe")


def test_container_name_modes():
    assert parse_container_name("train") == ("train", "auto")
    for mode in ("auto", "create", "exec", "no_exec"):
        assert parse_container_name(f"t-1.x+y_z:{mode}") == ("t-1.x+y_z", mode)


def test_same_flag_twice_same_value_is_fine_different_is_an_error():
    cli = [("container-image", "ubuntu"), ("container-image", "ubuntu")]
    assert resolve_step_options(cli).image == "ubuntu"
    with pytest.raises(SquallError, match=r"--container-image given twice with different "
                                          r"values \('ubuntu' and 'debian'"):
        resolve_step_options([("container-image", "ubuntu"), ("container-image", "debian")])
    cli = [("container-image", "u"), ("container-writable", None), ("container-writable", None)]
    assert resolve_step_options(cli).writable is True


@pytest.mark.parametrize(
    ("first", "second"),
    [("container-mount-home", "no-container-mount-home"),
     ("container-writable", "container-readonly"),
     ("no-container-entrypoint", "container-entrypoint"),
     ("container-reuse", "no-container-reuse")],
)
def test_opposite_flags_conflict(first, second):
    with pytest.raises(SquallError, match="conflicts with an earlier opposite setting"):
        resolve_step_options([("container-image", "u"), (first, None), (second, None)])


def test_command_line_beats_squall_beats_pyxis():
    env = {"PYXIS_CONTAINER_IMAGE": "pyxis", "SQUALL_CONTAINER_IMAGE": "squall",
           "PYXIS_CONTAINER_WORKDIR": "/from-pyxis"}
    opts = resolve_step_options([("container-image", "cli")], env)
    assert opts.image == "cli" and opts.workdir == "/from-pyxis"
    assert resolve_step_options([], env).image == "squall"
    assert resolve_step_options([], {"PYXIS_CONTAINER_IMAGE": "pyxis"}).image == "pyxis"


def test_environment_does_not_conflict_with_command_line():
    opts = resolve_step_options([("container-image", "u"), ("container-readonly", None)],
                                {"SQUALL_CONTAINER_WRITABLE": "1"})
    assert opts.writable is False


@pytest.mark.parametrize(
    ("var", "value", "field", "expected"),
    [
        ("SQUALL_CONTAINER_MOUNT_HOME", "1", "mount_home", True),
        ("SQUALL_CONTAINER_MOUNT_HOME", "off", "mount_home", False),
        ("SQUALL_CONTAINER_NO_MOUNT_HOME", "yes", "mount_home", False),
        ("PYXIS_CONTAINER_REMAP_ROOT", "TRUE", "remap_root", True),
        ("PYXIS_CONTAINER_REMAP_ROOT", "y", "remap_root", True),
        ("PYXIS_CONTAINER_WRITABLE", "n", "writable", False),
        ("SQUALL_CONTAINER_READONLY", "1", "writable", False),
        ("SQUALL_CONTAINER_READONLY", "0", "writable", True),
        ("SQUALL_CONTAINER_ENTRYPOINT_LOG", "1", "entrypoint_log", True),
        ("SQUALL_CONTAINER_ENTRYPOINT_LOG", "0", "entrypoint_log", False),
        ("SQUALL_CONTAINER_EFA", "off", "efa", "off"),
        ("SQUALL_CONTAINER_NCCL_DEBUG", "warn", "nccl_debug", "WARN"),
        ("SQUALL_CONTAINER_LOG", "verbose", "log", "verbose"),
        ("SQUALL_CONTAINER_NO_REUSE", "1", "reuse", False),
        ("PYXIS_CONTAINER_REUSE", "yes", "reuse", True),
        ("SQUALL_CONTAINER_MOUNT_HOME", "", "mount_home", None),
    ],
)
def test_environment_spellings(var, value, field, expected):
    opts = resolve_step_options([("container-image", "u")], {var: value})
    assert getattr(opts, field) == expected


def test_bad_environment_value_names_the_variable():
    with pytest.raises(SquallError) as exc:
        resolve_step_options([], {"SQUALL_CONTAINER_MOUNT_HOME": "maybe"})
    assert "'maybe' is not a boolean" in str(exc.value)
    assert "[from SQUALL_CONTAINER_MOUNT_HOME]" in str(exc.value)
    with pytest.raises(SquallError, match=r"\[from PYXIS_CONTAINER_MOUNTS\]"):
        resolve_step_options([], {"PYXIS_CONTAINER_MOUNTS": "/a:/b:nope"})


def test_bad_pyxis_value_is_ignored_when_squall_overrides_it():
    # A higher-priority source decides first; the weaker one is never parsed.
    opts = resolve_step_options([("container-image", "u")],
                                {"PYXIS_CONTAINER_IMAGE": "Bad", "SQUALL_CONTAINER_IMAGE": "x"})
    assert opts.image == "u"
    opts = resolve_step_options([], {"PYXIS_CONTAINER_MOUNTS": "bad",
                                     "SQUALL_CONTAINER_MOUNTS": "/a",
                                     "SQUALL_CONTAINER_IMAGE": "x"})
    assert opts.mounts == "/a"


def test_opposite_environment_variables_conflict():
    with pytest.raises(SquallError, match="SQUALL_CONTAINER_NO_MOUNT_HOME conflicts"):
        resolve_step_options([], {"SQUALL_CONTAINER_MOUNT_HOME": "1",
                                  "SQUALL_CONTAINER_NO_MOUNT_HOME": "1"})


def test_flags_without_image_warn_and_do_nothing():
    opts = resolve_step_options([("container-mounts", "/a"), ("no-container-mount-home", None),
                                 ("container-readonly", None)])
    assert opts.container is False
    assert opts.warning == ("squall: ignoring --container-mounts, --no-container-mount-home, "
                            "--container-readonly: no --container-image or --container-name given")


def test_environment_only_flags_do_not_warn():
    opts = resolve_step_options([], {"SQUALL_CONTAINER_MOUNTS": "/a"})
    assert opts.container is False and opts.warning == ""


def test_name_alone_requests_a_container_but_create_needs_an_image():
    opts = resolve_step_options([("container-name", "job1:exec")])
    assert opts.container is True and (opts.name, opts.name_mode) == ("job1", "exec")
    with pytest.raises(SquallError, match="--container-name=job1:create needs --container-image"):
        resolve_step_options([("container-name", "job1:create")])


def test_defaults_are_unset():
    opts = resolve_step_options([("container-image", "u")])
    assert (opts.mount_home, opts.remap_root, opts.entrypoint, opts.writable) == (
        None, None, None, None)
    assert opts.efa is None and opts.log is None and opts.name_mode == "auto"
    assert opts.reuse is None


def test_container_unshare_canonical_and_same_value_twice():
    opts = resolve_step_options([("container-image", "u"), ("container-unshare", "uts,net"),
                                 ("container-unshare", "net,uts,net")])
    assert opts.unshare == "net,uts"
    with pytest.raises(SquallError, match="--container-unshare given twice"):
        resolve_step_options([("container-unshare", "net"), ("container-unshare", "ipc")])


def test_container_unshare_from_pyxis_variable_and_cli_wins():
    opts = resolve_step_options([("container-image", "u")], {"PYXIS_CONTAINER_UNSHARE": "ipc"})
    assert opts.unshare == "ipc"
    opts = resolve_step_options([("container-image", "u"), ("container-unshare", "net")],
                                {"PYXIS_CONTAINER_UNSHARE": "ipc"})
    assert opts.unshare == "net"


def test_container_workdir_relative_is_kept_as_given():
    opts = resolve_step_options([("container-image", "u"), ("container-workdir", "../etc")])
    assert opts.workdir == "../etc"


def test_prestart_is_the_jobs_flag_not_a_steps():
    # --container-prestart=IMAGE (sbatch/salloc): every step inherits it; alone it makes
    # no container step and no warning, and its value is checked as an image.
    opts = resolve_step_options([("container-prestart", "/fsx/img.sqsh")])
    assert opts.container is False and opts.warning == ""
    # sbatch's other flags then shape the prestarted container: no warning either.
    opts = resolve_step_options([("container-prestart", "/fsx/img.sqsh"),
                                 ("container-mounts", "/fsx:/fsx")])
    assert opts.container is False and opts.warning == ""
    check_container_option("container-prestart", "nvcr.io#nvidia/pytorch:24.01-py3")
    with pytest.raises(SquallError):
        check_container_option("container-prestart", "no good!")
    with pytest.raises(SquallError):
        check_container_option("container-prestart", None)


# --- which steps keep their container for the job (the prolog may start it) -------------

@pytest.mark.parametrize(("cli", "kept"), [
    ([("container-image", "/fsx/a.sqsh")], True),
    ([("container-image", "/fsx/a.sqsh"), ("container-reuse", None)], True),
    ([("container-image", "/fsx/a.sqsh"), ("container-writable", None)], True),
    ([("container-image", "/fsx/a.sqsh"), ("container-name", "x")], False),
    ([("container-image", "/fsx/a.sqsh"), ("container-save", "/fsx/b.sqsh")], False),
    ([("container-image", "/fsx/a.sqsh"), ("no-container-reuse", None)], False),
    ([("container-name", "x")], False),
    ([], False),
])
def test_which_flags_keep_the_container_for_the_job(cli, kept):
    assert resolve_step_options(cli).kept_for_job is kept
