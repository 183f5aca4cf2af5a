"""--container-mounts specs to fstab lines (spank/core/mounts.c), driven through cffi."""

import shutil
import tempfile
from pathlib import Path

import pytest

from squall.core import Mount, check_mount_sources, parse_mounts
from squall.errors import SquallError


def test_full_spec_to_fstab_lines():
    mounts = parse_mounts("/data:/data:ro+rprivate,tmpfs:/scratch:size=1G+mode=1777,"
                          "umount:/opt/old,/fsx/home/u,/a:/b:bind+nosuid")
    assert [m.fstab for m in mounts] == [
        "/data /data none x-create=auto,rbind,ro,rprivate",
        "tmpfs /scratch tmpfs x-create=dir,rw,nosuid,nodev,size=1G,mode=1777",
        "none /opt/old none x-detach",
        "/fsx/home/u /fsx/home/u none x-create=auto,rbind",
        "/a /b none x-create=auto,bind,nosuid",
    ]
    assert [m.type for m in mounts] == ["bind", "tmpfs", "umount", "bind", "bind"]
    assert mounts[0] == Mount(source="/data", target="/data", type="bind",
                              options="x-create=auto,rbind,ro,rprivate",
                              fstab="/data /data none x-create=auto,rbind,ro,rprivate")


def test_tmpfs_defaults_yield_to_user_flags():
    (m,) = parse_mounts("tmpfs:/t:ro+suid+dev+noexec")
    assert m.options == "x-create=dir,ro,suid,dev,noexec"


def test_paths_are_normalised_and_relative_sources_resolved():
    (m,) = parse_mounts("./data//sub/.:./in/ctr/", cwd="/home/u/run")
    assert (m.source, m.target) == ("/home/u/run/data/sub", "/in/ctr")
    (m,) = parse_mounts("./data:/x")
    assert m.source == "./data"


def test_exact_duplicates_dropped_same_target_same_mount_kept_once():
    mounts = parse_mounts("/a:/b:ro,/a:/b:ro,/a:/b/:ro+ro")
    assert len(mounts) == 1 and mounts[0].fstab == "/a /b none x-create=auto,rbind,ro"


def test_flag_order_is_kept_and_repeats_collapse():
    (m,) = parse_mounts("/a:/b:nodev+ro+nodev")
    assert m.options == "x-create=auto,rbind,nodev,ro"


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("", "empty value"),
        ("a::b", "empty target"),
        (":x", "empty source"),
        ("/x:", "empty target"),
        ("/x:/y:", "empty flags"),
        (",,", "empty entry"),
        ("/a:/a,", "empty entry"),
        (",/a", "empty entry"),
        ("/a:/b:c:d", "unknown mount flag 'c:d'"),
        ("relative:/x", "source 'relative' must be an absolute path"),
        ("~/x:/x", "must be an absolute path"),
        ("/a:rel", "target 'rel' must start with '/' or '.'"),
        ("/a:/b:foo", "unknown mount flag 'foo'"),
        ("/a:/b:ro++rw", "empty mount flag"),
        ("/a:/b:+ro", "empty mount flag"),
        ("/a:/b:ro+", "empty mount flag"),
        ("/a:/b:ro+rw", "both ro and rw"),
        ("/a:/b:bind+rbind", "both bind and rbind"),
        ("/a:/b:private+shared", "more than one propagation flag"),
        ("/a:/b:size=1G", "unknown mount flag 'size=1G'"),
        ("tmpfs:/t:size=", "unknown mount flag"),
        ("tmpfs:/t:size=12Q", "unknown mount flag"),
        ("tmpfs:/t:mode=999", "unknown mount flag"),
        ("tmpfs:/t:rbind", "tmpfs takes no bind"),
        ("tmpfs", "tmpfs needs a target"),
        ("umount", "umount needs a target"),
        ("umount:/x:ro", "umount takes no flags"),
        ("/a/../etc:/x", "source holds a '..' component"),
        ("/a:/x/..", "target holds a '..' component"),
        ("..:/x", "source holds a '..' component"),
        ("./..:/x", "'..' component"),
        # Pyxis's mounts.bats greps Enroot's words for a target that climbs out.
        ("/home:../home", "target holds a '..' component, which could lead out of the "
                          "container's root (Enroot refuses it: Cross-device link)"),
        ("/a:/", "container's root"),
        ("/a:/.//", "container's root"),
        ("/a:.", "container's root"),
        ("/a:/b,/c:/b", "target '/b' is already mounted"),
        ("/a:/b:ro,/a:/b:rw", "already mounted"),
        ("tmpfs:/t:Size=1G", "unknown mount flag 'Size=1G'"),
        ("tmpfs:/t:huge=", "unknown mount flag"),
        ("tmpfs:/t:uid=abc", "unknown mount flag"),
        ("tmpfs:/t:mpol=bind:0-3$x", "unknown mount flag"),
        ("tmpfs:/t:opt=a b", "unknown mount flag"),
        ("/a b:/x y:r o", "unknown mount flag 'r o'"),
        ("/a\n/b /b none rbind:/x", "control character"),
        ("/a\t:/x", "control character"),
        ("/a\r:/x", "control character"),
        ("/a:/b\\x", "holds '\\'"),
        ("/${HOME}:/x", "holds '$'"),
        ("/$(id):/x", "holds '$'"),
        ("/" + "a" * 5000 + ":/x", "source is 5001 bytes long"),
        ("/a:/" + "b" * 4096, "target is 4097 bytes long"),
        ("/a:/b," * 11000, "limit is 65536"),
    ],
)
def test_bad_specs_name_the_field(spec, needle):
    with pytest.raises(SquallError) as exc:
        parse_mounts(spec)
    msg = str(exc.value)
    assert msg.startswith("--container-mounts:"), msg
    assert needle in msg, msg
    assert "\n" not in msg and len(msg) < 600


@pytest.mark.parametrize("raw", [b"/d\xffata:/x", b"/data:/\xe2\x82", b"/\xf5\x80\x80\x80:/x"])
def test_non_utf8_refused(raw):
    with pytest.raises(SquallError, match="--container-mounts: .*not valid UTF-8"):
        parse_mounts(raw)


def test_utf8_paths_accepted():
    (m,) = parse_mounts("/données:/mnt/ü")
    assert m.fstab == "/données /mnt/ü none x-create=auto,rbind"


def test_nul_refused():
    with pytest.raises(SquallError, match="NUL"):
        parse_mounts("/a:/b\0/c /etc none rbind")


def test_cwd_with_space_is_escaped_in_fstab():
    (m,) = parse_mounts("./x:/x", cwd="/home/a b")
    assert m.source == "/home/a b/x" and m.fstab == "/home/a\\040b/x /x none x-create=auto,rbind"
    with pytest.raises(SquallError, match="working directory"):
        parse_mounts("./x:/x", cwd="/home/a\tb")
    with pytest.raises(SquallError, match="'..' component"):
        parse_mounts("./x:/x", cwd="/home/../etc")


def test_every_fstab_line_has_four_fields():
    for m in parse_mounts("/a:/b:ro,tmpfs:/t,umount:/u,./c:/d"):
        assert len(m.fstab.split()) == 4 and m.fstab.split()[1] == m.target


def test_sources_must_exist(tmp_path):
    present = tmp_path / "present"
    present.mkdir()
    check_mount_sources(f"{present}:/x,tmpfs:/t,umount:/u")
    check_mount_sources("./present:/x", cwd=str(tmp_path))
    with pytest.raises(SquallError) as exc:
        check_mount_sources(f"{present}:/x,{tmp_path}/absent:/y")
    # Pyxis's words, which its tests and users' scripts grep (a long path is shown cut)
    assert str(exc.value).startswith("--container-mounts: source path does not exist: /")


def test_unreachable_source_named(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(SquallError, match="source path does not exist: /"):
        check_mount_sources(f"{afile}/inner:/x")
    # the path itself, where it is short enough to be shown whole
    short = Path(tempfile.mkdtemp(dir="/tmp", prefix="m"))
    try:
        (short / "f").write_text("x")
        with pytest.raises(SquallError, match=f"source path does not exist: {short}/f/in "):
            check_mount_sources(f"{short}/f/in:/x")
    finally:
        shutil.rmtree(short)


# --- Pyxis: spaces in paths, every tmpfs option (issue 10, item 9) ------------------------

def test_paths_with_spaces_are_escaped_as_fstab_does():
    (m,) = parse_mounts("/data/my files:/mnt/my data:ro")
    assert m.source == "/data/my files" and m.target == "/mnt/my data"
    assert m.fstab == "/data/my\\040files /mnt/my\\040data none x-create=auto,rbind,ro"
    assert len(m.fstab.split()) == 4
    (short,) = parse_mounts("/with space")
    assert short.target == "/with space"


@pytest.mark.parametrize(
    ("flags", "options"),
    [
        ("huge=within_size", "huge=within_size"),
        ("huge=always+size=4G", "huge=always,size=4G"),
        ("nr_blocks=100k", "nr_blocks=100k"),
        ("uid=1000+gid=1000+mode=0700", "uid=1000,gid=1000,mode=0700"),
        ("mpol=bind:0-3", "mpol=bind:0-3"),
        ("mpol=interleave", "mpol=interleave"),
        ("size=10%+noswap", "size=10%,noswap"),
        ("inode64", "inode64"),
        ("quota+usrquota_block_hardlimit=1m", "quota,usrquota_block_hardlimit=1m"),
        ("noexec+nosuid", "noexec,nosuid"),
    ],
)
def test_tmpfs_options_pass_through_to_the_kernel(flags, options):
    (m,) = parse_mounts(f"tmpfs:/t:{flags}")
    assert m.options.startswith("x-create=dir,rw,"), m.options
    assert m.options.endswith("," + options), m.options


def test_flags_field_is_the_rest_after_the_second_colon():
    (m,) = parse_mounts("tmpfs:/numa:mpol=bind:0-1+size=1m")
    assert m.fstab == "tmpfs /numa tmpfs x-create=dir,rw,nosuid,nodev,mpol=bind:0-1,size=1m"
