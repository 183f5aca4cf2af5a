"""The decision on a ``.sqsh`` file named by path (spank/core/sqshpolicy.c, via cffi; issue
41, docs/registries.md "Local files"): the lines ``sqshbuild policy compile`` writes from the
site policy's ``squall-sqsh`` transport, the most specific scope of the file's real path
first (the file, each directory up to /), then the transport's "", then the global default;
and the one line of a refusal."""

from __future__ import annotations

from squall._core import ffi, lib

HEAD = "squall-policy-sqsh 1\nstamp 1:2:3:4\n"
POLICY = HEAD + ("scope accept /fsx/images\nscope reject /fsx/home\n"
                 "scope accept /fsx/home/alice/ok.sqsh\nscope signed /fsx/signed\n"
                 "scope accept /fsx/my images\ntransport reject\ndefault accept\n")


def decide(text: str, path: str) -> tuple[int, int, str]:
    v = ffi.new("struct sq_sqshpolicy_verdict *")
    rc = lib.sq_sqshpolicy_decide(text.encode(), path.encode(), v)
    if rc < 0:
        return rc, -1, ""
    return v.verdict, v.where, ffi.string(v.scope).decode()


def test_the_most_specific_scope_decides() -> None:
    assert decide(POLICY, "/fsx/images/a.sqsh") == (lib.SQ_SQSHPOL_ACCEPT,
                                                     lib.SQ_SQSHPOL_SCOPE, "/fsx/images")
    assert decide(POLICY, "/fsx/images/team/deep/a.sqsh")[0] == lib.SQ_SQSHPOL_ACCEPT
    assert decide(POLICY, "/fsx/home/alice/x.sqsh") == (lib.SQ_SQSHPOL_REJECT,
                                                         lib.SQ_SQSHPOL_SCOPE, "/fsx/home")
    assert decide(POLICY, "/fsx/home/alice/ok.sqsh") == (
        lib.SQ_SQSHPOL_ACCEPT, lib.SQ_SQSHPOL_SCOPE, "/fsx/home/alice/ok.sqsh")
    assert decide(POLICY, "/fsx/signed/a.sqsh")[0] == lib.SQ_SQSHPOL_SIGNED
    assert decide(POLICY, "/fsx/my images/a.sqsh")[2] == "/fsx/my images"


def test_a_name_that_only_starts_like_a_scope_is_not_under_it() -> None:
    assert decide(POLICY, "/fsx/images2/a.sqsh") == (lib.SQ_SQSHPOL_REJECT,
                                                      lib.SQ_SQSHPOL_TRANSPORT, "")
    assert decide(POLICY, "/fsx/homework.sqsh")[1] == lib.SQ_SQSHPOL_TRANSPORT


def test_the_root_scope_holds_every_file() -> None:
    text = HEAD + "scope reject /\nscope accept /fsx\ndefault accept\n"
    assert decide(text, "/tmp/a.sqsh") == (lib.SQ_SQSHPOL_REJECT, lib.SQ_SQSHPOL_SCOPE, "/")
    assert decide(text, "/fsx/a.sqsh")[:2] == (lib.SQ_SQSHPOL_ACCEPT, lib.SQ_SQSHPOL_SCOPE)


def test_without_a_transport_scope_the_global_default_decides() -> None:
    text = HEAD + "scope accept /fsx\ndefault reject\n"
    assert decide(text, "/tmp/a.sqsh") == (lib.SQ_SQSHPOL_REJECT, lib.SQ_SQSHPOL_DEFAULT, "")


def test_a_policy_without_the_transport_judges_no_file() -> None:
    assert decide(HEAD, "/tmp/a.sqsh") == (lib.SQ_SQSHPOL_ACCEPT, lib.SQ_SQSHPOL_UNJUDGED, "")


def test_a_malformed_compiled_file_is_an_error() -> None:
    for text in ["", "squall-policy-sqsh 2\nstamp 1\n", HEAD + "scope maybe /fsx\n",
                 HEAD + "scope accept fsx\n", HEAD + "whatever\n", HEAD + "default\n",
                 "squall-policy-sqsh 1\n"]:
        assert decide(text, "/fsx/a.sqsh")[0] == -1, text


def test_freshness_is_the_stamp_of_the_policy_file() -> None:
    assert lib.sq_sqshpolicy_fresh(POLICY.encode(), b"1:2:3:4") == 1
    assert lib.sq_sqshpolicy_fresh(POLICY.encode(), b"1:2:3:5") == 0
    assert lib.sq_sqshpolicy_fresh(POLICY.encode(), b"1:2:3") == 0
    assert lib.sq_sqshpolicy_fresh(b"garbage", b"1:2:3:4") == 0


def refusal(text: str, path: str, room: int = 1024) -> str | None:
    v = ffi.new("struct sq_sqshpolicy_verdict *")
    assert lib.sq_sqshpolicy_decide(text.encode(), path.encode(), v) == 0
    out = ffi.new("char[]", room)
    rc = lib.sq_sqshpolicy_refusal(b"/etc/containers/policy.json", path.encode(), v, out, room)
    return ffi.string(out).decode() if rc == 0 else None


def test_a_refusal_is_one_line_naming_the_file_the_scope_and_why() -> None:
    line = refusal(POLICY, "/fsx/home/alice/x.sqsh")
    assert line is not None and "\n" not in line
    assert line.startswith("the site policy /etc/containers/policy.json refuses "
                           "/fsx/home/alice/x.sqsh: the scope \"/fsx/home\" of transport "
                           "squall-sqsh rejects every image")
    assert "docs/registries.md" in line
    line = refusal(POLICY, "/fsx/signed/a.sqsh")
    assert line is not None and "carries no signature" in line
    assert "the scope \"/fsx/signed\"" in line
    line = refusal(POLICY, "/tmp/a.sqsh")
    assert line is not None and "the squall-sqsh transport's default scope \"\"" in line
    line = refusal(HEAD + "default reject\n", "/tmp/a.sqsh")
    assert line is not None and "the global default rejects every image" in line


def test_an_accepted_file_has_no_refusal_and_a_short_buffer_is_refused() -> None:
    assert refusal(POLICY, "/fsx/images/a.sqsh") is None
    assert refusal(POLICY, "/fsx/home/x.sqsh", room=20) is None
