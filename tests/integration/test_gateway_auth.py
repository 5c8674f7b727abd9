"""Authentication at the edge (G3) and conversation keys scoped by identity (G4)."""

from __future__ import annotations

import asyncio
import hashlib
import time

import httpx2
import jwt
import openai
import pytest

from gateway.auth import Authenticator
from gateway.config import AuthConfig
from gateway.conversation import conversation_key
from gateway.errors import Unauthorized
from gateway.identity import Identity
from gateway.secrets import SecretSet
from tests.support import canary
from tests.support.gateway import client, running_gateway, simple_config
from tests.support.upstream import ScriptedUpstream

USER = [{"role": "user", "content": "hello"}]
ALICE_KEY = canary.ALICE_KEY
BOB_KEY = canary.BOB_KEY
JWT_SECRET = canary.JWT_SECRET


@pytest.fixture
def keyed() -> dict:
    return {
        "mode": "api_keys",
        "api_keys": [
            {"key": canary.ALICE_KEY_REF, "user_id": "alice", "org_id": "acme", "display_name": "Alice", "email": "alice@acme.test"},
            {"key_sha256": hashlib.sha256(BOB_KEY.encode()).hexdigest(), "user_id": "bob"},
        ],
    }


def test_api_keys_from_env_or_hash_are_accepted_and_others_get_401(upstream: ScriptedUpstream, keyed: dict) -> None:
    # R: G3, G8, B4
    with running_gateway(simple_config(upstream.url, auth=keyed)) as gw:
        assert client(gw, ALICE_KEY).chat.completions.create(model="assistant", messages=USER).choices
        assert client(gw, BOB_KEY).chat.completions.create(model="assistant", messages=USER).choices
        with pytest.raises(openai.AuthenticationError) as wrong:
            client(gw, "tg-wrong").chat.completions.create(model="assistant", messages=USER)
        missing = httpx2.post(gw.url + "/v1/chat/completions", json={"model": "assistant", "messages": USER})
        models = httpx2.get(gw.url + "/v1/models")
    assert wrong.value.status_code == 401 and "invalid API key" in wrong.value.message
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert missing.json()["error"]["type"] == "authentication_error"
    assert models.status_code == 401
    assert len(upstream.requests) == 2


def test_jwt_is_verified_and_its_claims_become_the_identity() -> None:
    # R: G3, G8
    auth = Authenticator(AuthConfig(mode="jwt", jwt={"secret": canary.JWT_SECRET_REF, "audience": "toolgate", "issuer": "https://idp.test"}), __import__("pathlib").Path("."), SecretSet())
    claims = {"sub": "u1", "org_id": "o1", "name": "Una", "email": "u@o.test", "aud": "toolgate", "iss": "https://idp.test",
              "exp": int(time.time()) + 60}
    token = jwt.encode(claims, JWT_SECRET, algorithm="HS256")
    identity = asyncio.run(auth.authenticate(f"Bearer {token}"))
    assert (identity.user_id, identity.org_id, identity.display_name, identity.email) == ("u1", "o1", "Una", "u@o.test")
    assert identity.credential_fp == hashlib.sha256(token.encode()).hexdigest()
    expired = jwt.encode({**claims, "exp": int(time.time()) - 10}, JWT_SECRET, algorithm="HS256")
    forged = jwt.encode(claims, "another-secret-entirely-0123456789", algorithm="HS256")
    wrong_aud = jwt.encode({**claims, "aud": "other"}, JWT_SECRET, algorithm="HS256")
    for bad, reason in ((expired, "expired"), (forged, "InvalidSignatureError"), (wrong_aud, "InvalidAudienceError"), ("junk", "DecodeError")):
        with pytest.raises(Unauthorized) as caught:
            asyncio.run(auth.authenticate(f"Bearer {bad}"))
        assert reason in caught.value.message and canary.CANARY not in caught.value.message


def test_auth_off_gives_an_anonymous_identity() -> None:
    # R: G3
    auth = Authenticator(AuthConfig(mode="none"), __import__("pathlib").Path("."), SecretSet())
    assert asyncio.run(auth.authenticate(None)) == Identity()
    assert asyncio.run(auth.authenticate("Bearer abc")).is_anonymous


def test_client_conversation_ids_are_scoped_by_identity() -> None:
    # R: G4
    alice, bob = Identity("alice", "acme", credential_fp="a"), Identity("bob", "acme", credential_fp="b")
    assert conversation_key(alice, "conv-1", USER) == conversation_key(alice, "conv-1", [{"role": "user", "content": "other"}])
    assert conversation_key(alice, "conv-1", USER) != conversation_key(bob, "conv-1", USER)
    anon1, anon2 = Identity(credential_fp="k1"), Identity(credential_fp="k2")
    assert conversation_key(anon1, "conv-1", USER) != conversation_key(anon2, "conv-1", USER)


def test_derived_key_needs_a_user_or_org_and_never_contains_the_token() -> None:
    # R: G4
    token_fp = hashlib.sha256(ALICE_KEY.encode()).hexdigest()
    alice = Identity("alice", None, credential_fp=token_fp)
    first = [{"role": "user", "content": "start"}]
    later = first + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "next"}]
    key = conversation_key(alice, None, first)
    assert key is not None and key == conversation_key(alice, None, later)
    assert key != conversation_key(alice, None, [{"role": "user", "content": "another conversation"}])
    assert canary.CANARY not in key and token_fp not in key
    assert conversation_key(Identity(credential_fp=token_fp), None, first) is None


def test_jwt_signed_with_a_key_from_the_jwks_url_is_accepted(upstream: ScriptedUpstream) -> None:
    # R: G3
    import json as _json

    from cryptography.hazmat.primitives.asymmetric import rsa
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from tests.support.http_server import serve

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = _json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwks = {"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}
    app = Starlette(routes=[Route("/jwks.json", lambda request: JSONResponse(jwks))])
    claims = {"sub": "carol", "org_id": "acme", "exp": int(time.time()) + 60, "aud": "toolgate", "iss": "https://idp.test"}
    good = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(claims, other, algorithm="RS256", headers={"kid": "k1"})
    with serve(app) as keys:
        config = simple_config(upstream.url, auth={"mode": "jwt", "jwt": {"jwks_url": keys.url + "/jwks.json", "algorithms": ["RS256"],
                                                                    "audience": "toolgate", "issuer": "https://idp.test"}})
        with running_gateway(config) as gw:
            assert client(gw, good).chat.completions.create(model="assistant", messages=USER).choices
            with pytest.raises(openai.AuthenticationError) as caught:
                client(gw, forged).chat.completions.create(model="assistant", messages=USER)
    assert "InvalidSignatureError" in caught.value.message


def test_jwt_whose_alg_names_another_key_family_gets_401_not_500(monkeypatch: pytest.MonkeyPatch) -> None:
    # R: G3
    import base64
    import json as _json
    from pathlib import Path

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    monkeypatch.setenv("JWT_PUBLIC", pem)
    bound = {"audience": "toolgate", "issuer": "https://idp.test"}
    by_secret = Authenticator(AuthConfig(mode="jwt", jwt={"secret": canary.JWT_SECRET_REF, **bound}), Path("."), SecretSet())
    by_public = Authenticator(AuthConfig(mode="jwt", jwt={"public_key": "env:JWT_PUBLIC", **bound}), Path("."), SecretSet())
    claims = {"sub": "u1", "exp": int(time.time()) + 60, "aud": "toolgate", "iss": "https://idp.test"}

    def forged(alg: str) -> str:
        part = lambda d: base64.urlsafe_b64encode(_json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
        return f"{part({'alg': alg, 'typ': 'JWT'})}.{part(claims)}.AAAA"

    cases = [
        (by_secret, jwt.encode(claims, private, algorithm="RS256")),
        (by_secret, forged("ES256")),
        (by_public, jwt.encode(claims, JWT_SECRET, algorithm="HS256")),
        (by_public, forged("ES256")),
        (by_secret, jwt.encode(claims, None, algorithm="none")),
    ]
    for auth, token in cases:
        with pytest.raises(Unauthorized) as caught:
            asyncio.run(auth.authenticate(f"Bearer {token}"))
        assert caught.value.message.startswith("invalid token: ") and canary.CANARY not in caught.value.message
