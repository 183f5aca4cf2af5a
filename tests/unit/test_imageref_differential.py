"""The plugin and sqshbuild parse a reference the same way (issue 39), checked on random texts.

Texts come from a grammar of transports, users, registries, ports, repositories, tags and
digests, with random garbage spliced in. For each one:
- the plugin (``parse_image_ref(text)``, what ``--container-image`` runs) and sqshbuild
  (``refs.parse_source``) refuse the same texts, except the two deliberate differences:
  a squashfs path only the plugin runs, and the archives only sqshbuild builds (the plugin's
  refusal then names the sqshbuild command);
- when both accept, they agree on kind, registry, repository, tag and digest;
- the core with archives (``archives=True``) is the one parser behind both: when it refuses,
  both refuse with its message; when it accepts, sqshbuild's source is its result (the
  archive's path made absolute).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from squall.core import ImageRef, parse_image_ref
from squall.errors import SquallError
from squall.sqshbuild.refs import Source, parse_source

HEX = "0123456789abcdef" * 4
ARCHIVES = {"docker-archive", "oci-archive", "oci-dir"}

TRANSPORTS = ["", "", "", "docker://", "dockerd://", "docker-archive:", "oci-archive:", "oci:",
              "podman://", "/", "./", "../", "docker:", "OCI:", "oci-archive", "oci", "Oci:"]
USERS = ["", "", "", "me@", "$oauthtoken@", "@", "a:b@", "u/x@"]
REGISTRIES = ["", "", "nvcr.io", "localhost", "localhost:5000", "login:5000", "5000",
              "oci-archive:5000", "oci:5000", "docker-archive:5000", "r.io:99999", "a-b.c:1",
              "-x.io", "myreg", "docker.io", "index.docker.io", "registry.hub.docker.com",
              "[::1]:5000", "127.0.0.1:5099", "UP.io", "oci-archive", "oci"]
SEPARATORS = ["/", "/", "#", "//", ":"]
COMPONENTS = ["ubuntu", "team", "img", "a__b", "c-d.e", "5000", "library", "x", "UP", "x..y",
              "", "a:b", "-a", "oci", "oci-archive", "v1", ".", ".."]
TAGS = ["", "", ":24.04", ":latest", ":", ":-x", ":v1", ":_T.a-g", ":a+b", ":" + "t" * 129,
        ":v1/", ":/x"]
DIGESTS = ["", "", "", f"@sha256:{HEX}", "@sha256:12", f"@sha512:{HEX}{HEX}",
           f"@sha256:{HEX.upper()}"]
# Lone surrogates other than the ones surrogateescape makes cannot come from argv.
GARBAGE = st.text(st.one_of(st.sampled_from(list("abz09AZ/.:@#-_$ +~%\t\n'\\;*\udcff")),
                            st.characters(blacklist_categories=("Cs",))), max_size=6)


@st.composite
def references(draw: st.DrawFn) -> str:
    repo = "/".join(draw(st.lists(st.sampled_from(COMPONENTS), min_size=1, max_size=3)))
    registry = draw(st.sampled_from(REGISTRIES))
    text = (draw(st.sampled_from(TRANSPORTS)) + draw(st.sampled_from(USERS)) +
            (registry + draw(st.sampled_from(SEPARATORS)) if registry else "") + repo +
            draw(st.sampled_from(TAGS)) + draw(st.sampled_from(DIGESTS)))
    how = draw(st.sampled_from(["as is", "as is", "insert", "replace", "random"]))
    if how == "random":
        return draw(GARBAGE)
    if how == "as is":
        return text
    at = draw(st.integers(0, len(text)))
    cut = at + draw(st.integers(0, 3)) if how == "replace" else at
    return text[:at] + draw(GARBAGE) + text[cut:]


def _try(parse: Callable[[str], object], text: str) -> tuple[object | None, str | None]:
    try:
        return parse(text), None
    except SquallError as exc:
        return None, str(exc)


def _agree(ref: ImageRef, src: Source) -> None:
    if ref.kind in ARCHIVES:
        assert (src.kind, src.path, src.tag) == (ref.kind, os.path.abspath(ref.path or ""),
                                                 ref.tag or "")
        return
    assert ref.kind == src.kind
    if ref.kind == "dockerd":
        assert f"dockerd://{src.name}" == ref.canonical
        return
    assert (src.registry, src.repository, src.tag, src.digest, src.user) == (
        ref.registry, ref.repository, ref.tag or "", ref.digest or "", ref.user or "")
    # Source writes REGISTRY/ where the core keeps Enroot's REGISTRY# for a bare host name.
    assert src.canonical == ref.canonical.replace("#", "/", 1)


SETTINGS = settings(max_examples=3000, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(text=references())
@example("oci-archive:5000/x").via("issue 39")
@example("docker-archive:5000/x").via("issue 39")
@example("oci:5000/x").via("issue 39")
@example(" ubuntu").via("sqshbuild stripped what the plugin refuses")
def test_plugin_and_sqshbuild_refuse_and_accept_alike(text: str) -> None:
    plugin, perr = _try(parse_image_ref, text)
    src, serr = _try(parse_source, text)
    if plugin is None:
        # What the plugin refuses, sqshbuild refuses, but for the archives it builds.
        assert src is None or (isinstance(src, Source) and src.kind in ARCHIVES), (text, perr)
        if src is not None:
            assert "sqshbuild build -o IMAGE.sqsh" in (perr or ""), perr
        return
    assert isinstance(plugin, ImageRef)
    if plugin.kind == "file":
        assert src is None and "squashfs file path" in (serr or ""), (text, src)
        return
    assert isinstance(src, Source), (text, plugin, serr)
    _agree(plugin, src)


@SETTINGS
@given(text=references())
@example("oci:/a:b/")
@example("docker://oci-archive:5000/x").via("a canonical form that read back as an archive")
@example("registry.hub.docker.com/ubuntu")
def test_sqshbuild_takes_the_cores_parse(text: str) -> None:
    core, cerr = _try(lambda t: parse_image_ref(t, archives=True), text)
    plugin, perr = _try(parse_image_ref, text)
    src, serr = _try(parse_source, text)
    if core is None:
        assert plugin is None and src is None, (text, plugin, src)
        assert perr == cerr and serr is not None, (text, perr, serr)
        assert text == "" or serr == cerr, (serr, cerr)
        assert "\n" not in (cerr or ""), cerr
        return
    assert isinstance(core, ImageRef)
    assert parse_image_ref(core.canonical, archives=True).canonical == core.canonical, text
    if core.kind in ARCHIVES:
        assert plugin is None and "sqshbuild build -o IMAGE.sqsh" in (perr or ""), perr
    else:
        assert plugin == core, text
    if core.kind == "file":
        assert src is None, text
        return
    assert isinstance(src, Source), (text, serr)
    _agree(core, src)
