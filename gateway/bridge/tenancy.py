"""Who may put what in a bridge: the rule that keeps one tenant's credentials out of another's graph.

Everyone who can call a bridge runs its graph, and anyone who can call an org bridge can also edit
that graph. So a bridge may only hold connections every one of its callers could use anyway:

- an org bridge (`owner: org:acme`) holds only connections of that org;
- a user's bridge (`owner: alice`) holds alice's connections and her org's: only alice calls it.

Without the rule, alice could put her personal connection into an org bridge, carol (same org)
could draw a graph around it, and every call alice makes would run carol's graph with alice's
credentials (a confused deputy). The rule is checked when a bridge is made and again at every call,
so a bridge stored before it, or declared in YAML, never lends a connection to the wrong people.

Ids are per owner: alice's `gh`, org acme's `gh` and bob's `gh` are three items, so creating one
never tells a caller whether someone they cannot see uses its id. A caller names an item by id
among those it can see (`visible_by_id`):

- creating refuses (409) an id that is taken among what the *creator* can see (their own items and
  their org's), whichever owner the new item is for: that tells nothing new;
- two visible items with one id still arise when another member creates an org item whose id a
  member's personal item already has (the creator cannot see it); then the caller's own item
  shadows the org's (owners are tried in the order of `owners_of`: the user, then the org) —
  a name the caller gave keeps meaning what it meant, and nobody else can change that;
- a bridge names its connections in its owner's view: an org bridge sees only the org's
  connections (a member's personal `gh` never shadows the org's there); a user's bridge sees the
  user's own, then the org's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from gateway.bridge.records import BridgeRecord, ConnectionRecord, Owned

ORG_PREFIX = "org:"

O = TypeVar("O", bound=Owned)


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


def visible_by_id(records: Iterable[O], owners: Sequence[str]) -> dict[str, O]:
    """The item each id names for a caller acting for `owners` (in `owners_of` order): of two
    visible items with one id, the one whose owner comes first (the caller's own shadows the
    org's). Items of other owners are left out."""
    rank = {owner: i for i, owner in enumerate(owners)}
    named: dict[str, O] = {}
    for record in records:
        if record.owner not in rank:
            continue
        earlier = named.get(record.id)
        if earlier is None or rank[record.owner] < rank[earlier.owner]:
            named[record.id] = record
    return named


def named(records: Iterable[O], owners: Sequence[str], item_id: str) -> O | None:
    """The item `item_id` names for a caller acting for `owners` (`visible_by_id`), or None."""
    return visible_by_id((r for r in records if r.id == item_id), owners).get(item_id)


def held_by(bridge: BridgeRecord, connections: Iterable[ConnectionRecord], owners: Sequence[str]) -> list[ConnectionRecord]:
    """The connections `bridge` federates, its ids resolved in its owner's view among `connections`
    (those the caller sees): only connections it may hold are candidates, so a member's personal
    connection never shadows an org bridge's org connection."""
    usable = visible_by_id((c for c in connections if usable_in(bridge, c)), owners)
    return [usable[c] for c in bridge.connections if c in usable]
