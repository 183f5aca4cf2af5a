"""Reading the site policy file: strict, as containers/image is (an unknown field, a duplicate
key, a bad requirement stops every build with one line naming the file); what squall cannot
verify (signedBy's GPG, Fulcio, Rekor, PKI) refuses the images of its scope only; a key file
or policy file others may write is never trusted."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from squall.errors import SquallError
from squall.sqshbuild import policy
from squall.sqshbuild.policy import load, parse
from squall.sqshbuild.policy_names import image_name

P = Path("/etc/containers/policy.json")


def pem() -> bytes:
    return ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def one_line(text: str | bytes) -> str:
    with pytest.raises(SquallError) as info:
        parse(text.encode() if isinstance(text, str) else text, P)
    line = str(info.value)
    assert "\n" not in line and str(P) in line, line
    return line


def doc(*reqs: dict, scope: str = "login:5000") -> str:
    return json.dumps({"default": [{"type": "reject"}],
                       "transports": {"docker": {scope: list(reqs)}}})


@pytest.mark.parametrize(("text", "says"), [
    ("", "not valid JSON"),
    ("[]", "JSON object"),
    ('{"default": [{"type": "reject"}], "default": [{"type": "reject"}]}', "twice"),
    ('{"default": {"type": "reject"}}', "list"),
    ('{"default": [{"type": "reject", "why": "x"}]}', "why"),
    ('{"default": [{"type": "insecureAcceptAnything"}], "transports": []}', "transports"),
    ('{"default": [{"type": "reject"}], "transports": {"docker": {"x": []}}}', "empty"),
    ('{"default": [{}]}', "type"),
    ('{"default": [{"type": "sigstoreSigned"}]}', "keyPath"),
    ('{"default": [{"type": "reject"}], "x": NaN}', "NaN"),
    ('{"default": [{"type": ["reject"]}]}', "type"),
])
def test_malformed_files(text, says):
    assert says in one_line(text)


def test_deep_nesting_is_refused_without_recursing():
    assert "deeper" in one_line("[" * 100000)


def test_exactly_one_key_source():
    data = base64.b64encode(pem()).decode()
    assert "exactly one" in one_line(doc({"type": "sigstoreSigned", "keyPath": "/k.pub",
                                          "keyData": data}))


def test_key_data_must_be_a_base64_public_key():
    assert "keyData" in one_line(doc({"type": "sigstoreSigned", "keyData": "%%%"}))
    bad = base64.b64encode(b"-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----\n")
    assert "public key" in one_line(doc({"type": "sigstoreSigned", "keyData": bad.decode()}))


def test_key_datas_and_key_paths_take_several_keys(tmp_path):
    keys = [base64.b64encode(pem()).decode() for _ in range(2)]
    p = parse(doc({"type": "sigstoreSigned", "keyDatas": keys}).encode(), P)
    (req,) = p.lookup(image_name("login:5000", "a", "v1", "")).requirements
    assert len(req.keys) == 2
    for n in range(2):
        (tmp_path / f"{n}.pub").write_bytes(pem())
    p = parse(doc({"type": "sigstoreSigned",
                   "keyPaths": [str(tmp_path / "0.pub"), str(tmp_path / "1.pub")]}).encode(), P)
    assert len(p.lookup(image_name("login:5000", "a", "v1", "")).requirements[0].keys) == 2


@pytest.mark.parametrize("identity", [
    {"type": "matchAnything"},
    {"type": ["matchRepository"]},
    {"type": "exactReference"},
    {"type": "exactReference", "dockerReference": "login:5000/a"},  # no tag: not exact
    {"type": "exactRepository", "dockerRepository": "Not/A/Reference"},
    {"type": "remapIdentity", "prefix": "login:5000/a", "signedPrefix": "up.example/x:v1"},
    {"type": "remapIdentity", "prefix": "login:5000/a"},
    {"type": "matchRepository", "extra": 1},
])
def test_bad_signed_identities(identity):
    data = base64.b64encode(pem()).decode()
    one_line(doc({"type": "sigstoreSigned", "keyData": data, "signedIdentity": identity}))


@pytest.mark.parametrize(("req", "says"), [
    ({"type": "signedBy", "keyType": "GPGKeys", "keyPath": "/etc/pki/rpm-gpg/KEY"},
     "signedBy"),
    ({"type": "sigstoreSigned", "fulcio": {"caPath": "/ca", "oidcIssuer": "https://i",
                                           "subjectEmail": "a@b"},
      "rekorPublicKeyPath": "/rekor.pub"}, "fulcio"),
    ({"type": "sigstoreSigned", "keyData": "", "rekorPublicKeyData": ""}, "rekor"),
    ({"type": "signedBaseLayer", "baseLayerIdentity": {"type": "matchRepository"}},
     "signedBaseLayer"),
])
def test_what_squall_cannot_verify_refuses_its_scope_only(req, says):
    """A distribution's policy.json (Red Hat's signs registry.redhat.io with GPG) must not
    stop every build: the images of that scope are refused, saying why."""
    if req.get("keyData") == "":
        req["keyData"] = base64.b64encode(pem()).decode()
        req["rekorPublicKeyData"] = req["keyData"]
    p = parse(json.dumps({"default": [{"type": "insecureAcceptAnything"}],
                          "transports": {"docker": {"registry.redhat.io": [req]}}}).encode(), P)
    (unsupported,) = p.lookup(image_name("registry.redhat.io", "ubi9", "latest", "")
                              ).requirements
    assert unsupported.kind == "unsupported" and says in unsupported.why
    assert p.lookup(image_name("login:5000", "a", "v1", "")).requirements[0].kind == \
        "insecureAcceptAnything"


def test_an_unknown_field_of_an_unsupported_type_is_still_malformed():
    assert "colour" in one_line(doc({"type": "signedBy", "keyType": "GPGKeys",
                                     "keyPath": "/k", "colour": "red"}))


# -- the files themselves -----------------------------------------------------------------------
@pytest.fixture
def env(tmp_path, monkeypatch):
    path = tmp_path / "policy.json"
    monkeypatch.setenv(policy.POLICY_ENV, str(path))
    return path


def test_no_file_is_no_policy(env):
    assert load() is None


def test_the_system_file_when_no_variable(monkeypatch, tmp_path):
    monkeypatch.delenv(policy.POLICY_ENV, raising=False)
    monkeypatch.setattr(policy, "POLICY_FILE", tmp_path / "policy.json")
    assert load() is None
    (tmp_path / "policy.json").write_text('{"default": [{"type": "reject"}]}')
    loaded = load()
    assert loaded is not None and loaded.path == tmp_path / "policy.json"


def test_a_policy_file_others_may_write_is_refused(env):
    env.write_text('{"default": [{"type": "insecureAcceptAnything"}]}')
    env.chmod(0o666)
    with pytest.raises(SquallError, match="chmod"):
        load()


@pytest.mark.needs_root("a file of another user's is made with chown")
def test_another_users_policy_file_is_refused(env):
    env.write_text('{"default": [{"type": "insecureAcceptAnything"}]}')
    os.chown(env, 4242, 4242)
    with pytest.raises(SquallError, match="root"):
        load()


def test_a_key_file_others_may_write_is_refused(env, tmp_path):
    key = tmp_path / "k.pub"
    key.write_bytes(pem())
    key.chmod(0o646)
    env.write_text(doc({"type": "sigstoreSigned", "keyPath": str(key)}))
    with pytest.raises(SquallError, match=str(key)):
        load()


def test_a_fifo_is_not_waited_on(env):
    os.mkfifo(env)
    with pytest.raises(SquallError, match="regular file"):
        load()


def test_a_huge_file_is_refused(env):
    env.write_text('{"default": [{"type": "reject"}]}' + " " * (2 << 20))
    with pytest.raises(SquallError, match="larger"):
        load()


def test_no_signed_scope_does_not_import_cryptography(tmp_path):
    """Every step's sqshbuild reads the policy: one without signed scopes costs no import
    of the crypto library (about 15 ms)."""
    import subprocess
    import sys
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"default": [{"type": "insecureAcceptAnything"}],
                                "transports": {"docker": {"x.example": [{"type": "reject"}]}}}))
    code = ("import sys; from squall.sqshbuild import policy; assert policy.load() is not None;"
            "assert not [m for m in sys.modules if m.startswith('cryptography')]")
    subprocess.run([sys.executable, "-c", code], check=True,
                   env={**os.environ, policy.POLICY_ENV: str(path),
                        "PYTHONPATH": str(Path(policy.__file__).parents[2])})


@pytest.mark.parametrize("value", [5, [5], [], "", None, {"a": 1}])
def test_key_paths_of_the_wrong_type(value):
    for source in ("keyPath", "keyPaths", "keyData", "keyDatas"):
        one_line(doc({"type": "sigstoreSigned", source: value}))
