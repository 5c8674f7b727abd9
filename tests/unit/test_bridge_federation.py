"""Whom a caller acts for on the Bridge (F2): its user id and its org, never someone else's key."""

from __future__ import annotations

from gateway.bridge.federation import CallerScope, owners_of
from gateway.identity import Identity


def test_a_caller_acts_for_its_user_id_and_its_org() -> None:
    # R: F2
    assert owners_of(Identity(user_id="alice", org_id="acme")) == ("alice", "org:acme")
    assert owners_of(Identity(org_id="acme")) == ("org:acme",)
    assert owners_of(Identity()) == ("anonymous",)


def test_a_user_id_shaped_like_another_owner_key_does_not_act_for_that_owner() -> None:
    # R: F2
    assert owners_of(Identity(user_id="org:acme", org_id="globex")) == ("user:org:acme", "org:globex")
    assert owners_of(Identity(user_id="anonymous")) == ("user:anonymous",)
    assert owners_of(Identity(user_id="user:bob")) == ("user:user:bob",)


def test_a_user_named_like_an_org_never_shares_the_orgs_audit_actor() -> None:
    # R: F5
    user = CallerScope(Identity(user_id="org:acme"), owners_of(Identity(user_id="org:acme")))
    org = CallerScope(Identity(org_id="acme"), owners_of(Identity(org_id="acme")))
    alice = CallerScope(Identity(user_id="alice", org_id="acme"), owners_of(Identity(user_id="alice", org_id="acme")))
    assert (user.actor_id, org.actor_id, alice.actor_id) == ("user:org:acme", "org:acme", "alice")
