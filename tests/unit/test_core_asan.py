"""The C core under AddressSanitizer + UBSan: spank/core/tests/fuzz_core.c runs every parser
over a hostile corpus and deterministic mutations of it. A memory error, leak or undefined
behaviour aborts the driver, and so fails this test."""

import os
import subprocess
from pathlib import Path

import pytest

from gate import need_tool

CORE = Path(__file__).resolve().parents[2] / "spank" / "core"
MODULES = ["strbuf", "quote", "imageref", "imageref_archive", "mounts", "mounts_exist", "strv",
           "env", "config", "options", "conf", "procstat", "unshare"]
HEX = "0123456789abcdef" * 4

CORPUS = [
    # valid forms
    "ubuntu:24.04", "docker://ubuntu", "nvcr.io#nvidia/pytorch:24.05-py3",
    "$oauthtoken@nvcr.io#nvidia/pytorch:24.05-py3", f"ubuntu@sha256:{HEX}",
    f"me@r.example.com:443#a/b:v@sha256:{HEX}", "dockerd://ubuntu", "localhost:5000/x/y",
    "/fsx/images/pytorch.sqsh", "./x.sqsh", "/data:/data:ro+rprivate",
    "oci-archive:5000/x", "docker-archive:/a:b.tar", "oci:/l:v1", "oci:/l:v1/", "oci::",
    "oci:/x:-", "oci:",
    "tmpfs:/scratch:size=1G+mode=1777", "umount:/x", "./rel:/y", "/a,/b:/c:bind",
    "train:exec", "name:no_exec", "A,B,NCCL_DEBUG", "auto", "require", "off", "quiet",
    "verbose", "INFO", "1", "0", "true", "no", "runtime_path=/run/squall", "efa=off",
    "PATH=/usr/bin", "A=1", "KEY=a=b",
    "4242 (sh) T 1 2 3 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 2 3 4",
    "squall-running 1 4242 987654\n", "1 (a) b) R " + "0 " * 19, "squall-running 1 0 5",
    # separators in odd places
    "", ":", "::", ":::", ",", ",,", "a::b", ":x", "x:", "/x:", "/x:/y:", "/a:/b:c:d",
    "/a:/b:ro++rw", "+", "/a:/b:+", "@", "@@", "#", "##", "a#", "#a", "a@", "@a", "a:@:#",
    "x://", "://", "docker://", "dockerd://", "=", "==", "A=", "=A", "a=b=c",
    # traversal, whitespace, injection
    "..", "../..", "/a/../b", "/a/..", "./..", "/a b:/c",
    "net,ipc,uts", "net,,", "tmpfs:/t:mpol=bind:0-3", "/a\n/etc /x none rbind:/y",
    "a\tb", "\r\n", "/${HOME}:/x", "$(id)", "`id`", "'", "'\\''", "\\", "a;b", "a|b",
    "ENROOT_X=1", "LD_PRELOAD=/x.so", "BASH_FUNC_x%%=() { id; }",
    # control bytes (non-UTF-8 inputs are in RAW)
    "\x7f", "\x01",
    # long values
    "a" * 5000, "/" + "a" * 5000, "/a:/" + "b" * 4200, "/a:/b," * 3000, "x:" * 3000,
    "A," * 3000, "ubuntu:" + "t" * 300, "n" * 200 + ":exec", "a/" * 2000,
]
RAW = [b"\xff", b"/d\xffata:/x", b"ubu\xc0\xafntu", b"/\xed\xa0\x80", b"/\xf5\x80\x80\x80",
       b"\xe2\x82", b"A=\xff\xfe", bytes(range(1, 256))]


@pytest.fixture(scope="module")
def fuzz_core(tmp_path_factory) -> Path:
    gcc = need_tool("gcc", "gcc")
    out = tmp_path_factory.mktemp("asan") / "fuzz_core"
    cmd = [gcc, "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-g", "-O1",
           "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
           "-fno-omit-frame-pointer", f"-I{CORE}",
           *[str(CORE / f"{m}.c") for m in MODULES], str(CORE / "tests" / "fuzz_core.c"),
           "-o", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    return out


def test_hostile_corpus_under_sanitizers(fuzz_core, tmp_path):
    corpus = tmp_path / "corpus"
    entries = [s.encode() for s in CORPUS]
    corpus.write_bytes(b"\0".join(entries + RAW) + b"\0")
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:exitcode=86",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=87")
    res = subprocess.run([str(fuzz_core), str(corpus), "12"], capture_output=True, text=True,
                         timeout=600, env=env, check=False)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "ERROR: AddressSanitizer" not in res.stderr
    assert "runtime error" not in res.stderr
    assert f"{len(entries) + len(RAW)} entries" in res.stdout
    assert "0 bad messages" in res.stdout


def test_driver_catches_a_memory_error(fuzz_core, tmp_path):
    """The harness can fail: a one-byte heap overflow in a copy of strbuf.c is caught."""
    gcc = need_tool("gcc", "gcc")
    src = (CORE / "strbuf.c").read_text()
    broken = src.replace("p = malloc(n + 1);", "p = malloc(n);", 1)
    assert broken != src
    (tmp_path / "strbuf.c").write_text(broken)
    exe = tmp_path / "broken"
    cmd = [gcc, "-std=gnu11", "-g", "-O1", "-fsanitize=address,undefined",
           "-fno-sanitize-recover=all", f"-I{CORE}", str(tmp_path / "strbuf.c"),
           *[str(CORE / f"{m}.c") for m in MODULES if m != "strbuf"],
           str(CORE / "tests" / "fuzz_core.c"), "-o", str(exe)]
    subprocess.run(cmd, capture_output=True, timeout=300, check=True)
    corpus = tmp_path / "corpus"
    corpus.write_bytes(b"/a:/b:ro\0")
    res = subprocess.run([str(exe), str(corpus), "1"], capture_output=True, text=True,
                         timeout=120, check=False)
    assert res.returncode != 0
    assert "AddressSanitizer: heap-buffer-overflow" in res.stderr
