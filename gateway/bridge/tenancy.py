"""Who may put what in a bridge: the rule that keeps one tenant's credentials out of another's graph.

Everyone who can call a bridge runs its graph, and anyone who can call an org bridge can also edit
that graph. So a bridge may only hold connections every one of its callers could use anyway:

- an org bridge (`owner: org:acme`) holds only connections of that org;
- a user's bridge (`owner: alice`) holds alice's connections and her org's: only alice calls it.

Without the rule, alice could put her personal connection into an org bridge, carol (same org)
could draw a graph around it, and every call alice makes would run carol's graph with alice's
credentials (a confused deputy). The rule is checked when a bridge is made and again at every call,
so a bridge stored before it, or declared in YAML, never lends a connection to the wrong people.
"""

from __future__ import annotations

from gateway.bridge.records import BridgeRecord, ConnectionRecord

ORG_PREFIX = "org:"


def is_org_owner(owner: str) -> bool:
    """True for an org's owner key (`org:<id>`)."""
    return owner.startswith(ORG_PREFIX)


def may_hold(bridge_owner: str, connection_owner: str) -> bool:
    """May a bridge owned by `bridge_owner` hold a connection owned by `connection_owner`? (The
    caller's own visibility of the connection is checked separately.)"""
    return not is_org_owner(bridge_owner) or connection_owner == bridge_owner


def usable_in(bridge: BridgeRecord, connection: ConnectionRecord) -> bool:
    """`may_hold` for stored records (used by the federation at every call)."""
    return may_hold(bridge.owner, connection.owner)
