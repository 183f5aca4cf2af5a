"""A private image (issue 26): on login:5001, a registry that requires credentials, which
only bob has (~/.config/enroot/.credentials, docs/cluster.md). The image builder may not
pull it (401), so the plugin builds it as bob, with bob's credentials, into bob's own cache
(0700): it is never in the shared cache, and alice, asking for the same reference, gets one
error line and cannot read bob's file."""

from __future__ import annotations

import json
import re
import stat
import uuid

import pytest

from .cache_model import (
    CACHE,
    PRIVATE,
    PRIVATE_LOG,
    PRIVATE_PASSWORD,
    canary,
    expected_pulls,
    host_path,
    images_in,
    log_since,
    mark,
    plant_canary,
    served_blobs,
    uid_of,
)
from .cluster import Cluster

pytestmark = pytest.mark.cluster
BOB_CACHE = "/fsx/home/bob/.cache/squall/images"
FALLBACK = "squall: the image builder may not pull {ref}; building it as you, in your own cache"


def push_private(cluster: Cluster, tools: str, repo: str) -> dict:
    """Pushed with bob's registry account (root's copy of its password)."""
    res = cluster.run(f"REGISTRY={PRIVATE} REGISTRY_USER=bob REGISTRY_PASSWORD_FILE="
                      f"{PRIVATE_PASSWORD} python3 {tools}/push.py {repo} v1 1",
                      user="root", timeout=300)
    return json.loads(res.out.strip().splitlines()[-1])


def test_the_private_registry_wants_credentials(cluster: Cluster) -> None:
    res = cluster.run(f"python3 -c \"import requests; print(requests.get("
                      f"'http://{PRIVATE}/v2/').status_code)\"", user="alice")
    assert res.out.strip() == "401", res
    for user in ("squall", "alice", "carol"):  # bob alone has credentials for it
        res = cluster.run("cat ~/.config/enroot/.credentials", user=user, check=False)
        assert PRIVATE not in res.out, user
    st = host_path(cluster, "/fsx/home/bob/.config/enroot/.credentials").stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uid_of(cluster, "bob"), 0o600)


def test_bob_pulls_his_private_image_into_his_own_cache_alice_gets_one_line(
        cluster: Cluster, tools: str) -> None:
    tag = uuid.uuid4().hex[:8]
    pushed = push_private(cluster, tools, f"private/bob-{tag}")
    ref = f"{PRIVATE}/private/bob-{tag}:v1"
    want = expected_pulls(cluster, pushed["blobs"], CACHE, BOB_CACHE)
    since = mark(cluster, PRIVATE_LOG)
    res = cluster.run(f"srun -N1 -w node1 --container-image={ref} printenv GREETING",
                      user="bob", timeout=300)
    assert res.out.split() == ["from-the-image"], res
    assert res.err.count(FALLBACK.format(ref=ref)) == 1, res
    assert "Traceback" not in res.err, res

    # pulled once, with bob's credentials (the registry's one account, so every request
    # it authorized was his), after the builder, who has none, was refused
    assert served_blobs(cluster, PRIVATE_LOG, since, pushed["blobs"]) == want
    log = log_since(cluster, PRIVATE_LOG, since).splitlines()
    manifest = f"uri=/v2/private/bob-{tag}/manifests/v1"
    assert any("authorized request" in ln and manifest in ln for ln in log)
    assert any("error authorizing context" in ln and manifest in ln for ln in log)

    # in bob's own cache, his and 0700; not in the shared cache
    hexd = pushed["digest"].split(":")[1]
    image = host_path(cluster, f"{BOB_CACHE}/sha256-{hexd}.sqsh")
    assert image.is_file(), sorted(p.name for p in image.parent.glob("*"))
    bob = uid_of(cluster, "bob")
    st = image.parent.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (bob, 0o700)
    assert image.stat().st_uid == bob
    assert images_in(cluster, CACHE, pushed["digest"]) == []
    for blob in [b for b, n in want.items() if n]:  # what only the private image has
        assert images_in(cluster, CACHE, blob) == [], blob

    # bob again, on another node: his own cache, no second download
    since = mark(cluster, PRIVATE_LOG)
    res = cluster.run(f"srun -N1 -w node2 --container-image={ref} printenv GREETING",
                      user="bob", timeout=300)
    assert res.out.split() == ["from-the-image"], res
    assert served_blobs(cluster, PRIVATE_LOG, since, pushed["blobs"]) == \
        {b: 0 for b in pushed["blobs"]}

    # alice: the same reference fails in one line, without a traceback or bob's secret
    res = cluster.run(f"srun -N1 -w node1 --container-image={ref} printenv GREETING",
                      user="alice", check=False, timeout=300)
    assert res.rc != 0, res
    errors = [ln for ln in res.err.splitlines() if ln.startswith("squall: error:")]
    assert len(errors) == 1, res
    assert PRIVATE in errors[0], res
    assert "Traceback" not in res.err and "from-the-image" not in res.out, res
    secret = cluster.run(f"cat {PRIVATE_PASSWORD}", user="root").out.strip()
    assert secret not in res.err + res.out
    assert images_in(cluster, "/fsx/home/alice/.cache/squall/images", pushed["digest"]) == []
    assert images_in(cluster, CACHE, pushed["digest"]) == []
    # and she cannot read bob's image, nor list his cache
    for attempt in (f"cat {BOB_CACHE}/sha256-{hexd}.sqsh >/dev/null", f"ls {BOB_CACHE}",
                    f"unsquashfs -l {BOB_CACHE}/sha256-{hexd}.sqsh"):
        res = cluster.run(attempt, user="alice", check=False)
        assert res.rc != 0 and re.search("Permission denied|cannot open|failed to open",
                                         res.err), (attempt, res)


BUILDER_CREDS = "/var/lib/squall-builder/.config/enroot/.credentials"
SITE = "/etc/squall/sqshbuild.toml"


@pytest.fixture
def builder_holds_the_private_registrys_key(cluster: Cluster):
    """The site puts a key of its own in the builder's credentials (docs/security.md): here
    the private registry's one account, on every node, as root would."""
    secret = cluster.run(f"cat {PRIVATE_PASSWORD}", user="root").out.strip()
    for node in ("node1", "node2", "node3"):
        cluster.run(f"install -d -o squall-builder -g squall-builder -m 0700 "
                    f"$(dirname {BUILDER_CREDS}) && umask 077 && printf '%s\\n' "
                    f"'machine {PRIVATE} login bob password {secret}' > {BUILDER_CREDS} && "
                    f"chown squall-builder: {BUILDER_CREDS}", node=node, user="root")
    yield secret
    for node in ("node1", "node2", "node3"):
        cluster.run(f"rm -f {BUILDER_CREDS} {SITE}", node=node, user="root")


def test_alice_cannot_make_the_builder_pull_what_only_its_key_reaches(
        cluster: Cluster, tools: str, builder_holds_the_private_registrys_key) -> None:
    """Issue 39's confused deputy: with the builder's own key for the private registry,
    alice asked for a repository she may not pull and read it in the shared cache. The
    builder now asks anonymously for her; she gets the registry's refusal in one line, and
    nothing lands in the shared cache. Once the site shares the key for a repository, her
    step gets it through the builder."""
    before = plant_canary(cluster, "node1")
    tag = uuid.uuid4().hex[:8]
    pushed = push_private(cluster, tools, f"private/deputy-{tag}")
    ref = f"{PRIVATE}/private/deputy-{tag}:v1"
    res = cluster.run(f"srun -N1 -w node1 --container-image={ref} printenv GREETING",
                      user="alice", check=False, timeout=300)
    assert res.rc != 0 and "from-the-image" not in res.out, res
    assert res.err.count(FALLBACK.format(ref=ref)) == 1, res
    assert "the builder's credentials are not shared for login:5001/private/deputy-" \
        in res.err, res
    assert images_in(cluster, CACHE, pushed["digest"]) == []
    assert builder_holds_the_private_registrys_key not in res.err + res.out
    # the site shares the key for private/: now the builder pulls it for her
    for node in ("node1", "node2", "node3"):
        cluster.run(f"printf '[credentials]\\nshared = [\"{PRIVATE}/private\"]\\n' > {SITE}",
                    node=node, user="root")
    res = cluster.run(f"srun -N1 -w node1 --container-image={ref} printenv GREETING",
                      user="alice", timeout=300)
    assert res.out.split() == ["from-the-image"], res
    assert "may not pull" not in res.err, res
    assert images_in(cluster, CACHE, pushed["digest"]) != []
    assert canary(cluster, "node1") == before
