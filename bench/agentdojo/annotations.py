"""The MCP annotations each suite's server gives its tools, and the sources an operator trusts.

Classified by reading each tool's code in agentdojo 0.1.35 (`default_suites/v1/tools/*.py`), not
by its name. MCP's meaning: `readOnlyHint` — the tool does not modify its environment;
`destructiveHint` (only for tools that are not read-only) — it may overwrite or delete, not only
add; `openWorldHint` — it reaches entities outside the tool's own data (the web, other people).
Two tools whose names say "read" do write: `get_unread_emails` marks what it returns as read, and
slack's `get_webpage` logs the URL it fetched (a GET to the outside world: read-only and open-world,
as a fetch tool is annotated; the URL itself can carry data out).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Annotation:
    """One tool's hints; `destructive` is None for read-only tools (MCP ignores it there)."""

    read_only: bool
    open_world: bool
    destructive: bool | None = None
    note: str = ""


def _ro(note: str = "") -> Annotation:
    return Annotation(read_only=True, open_world=False, note=note)


def _write(*, destructive: bool, open_world: bool, note: str) -> Annotation:
    return Annotation(read_only=False, open_world=open_world, destructive=destructive, note=note)


_EMAIL = {
    "send_email": _write(destructive=False, open_world=True, note="sends mail to any address"),
    "delete_email": _write(destructive=True, open_world=False, note="moves an email to the trash"),
    "get_unread_emails": _write(destructive=False, open_world=False, note="marks the emails it returns as read"),
    "get_sent_emails": _ro(), "get_received_emails": _ro(), "get_draft_emails": _ro(),
    "search_emails": _ro(), "search_contacts_by_name": _ro(), "search_contacts_by_email": _ro(),
}
_CALENDAR = {
    "get_current_day": _ro(), "search_calendar_events": _ro(), "get_day_calendar_events": _ro(),
    "create_calendar_event": _write(destructive=False, open_world=True, note="adds an event, mails its participants"),
    "cancel_calendar_event": _write(destructive=True, open_world=True, note="cancels an event, mails its participants"),
    "reschedule_calendar_event": _write(destructive=True, open_world=True, note="moves an event, mails its participants"),
    "add_calendar_event_participants": _write(destructive=False, open_world=True, note="adds participants to an event"),
}
_DRIVE = {
    "append_to_file": _write(destructive=False, open_world=False, note="appends to a file"),
    "search_files_by_filename": _ro(), "get_file_by_id": _ro(), "list_files": _ro(), "search_files": _ro(),
    "create_file": _write(destructive=False, open_world=False, note="creates a file"),
    "delete_file": _write(destructive=True, open_world=False, note="deletes a file"),
    "share_file": _write(destructive=False, open_world=True, note="grants any address access to a file"),
}
_TRAVEL_READS = [
    "get_user_information", "get_all_hotels_in_city", "get_hotels_prices", "get_rating_reviews_for_hotels",
    "get_hotels_address", "get_all_restaurants_in_city", "get_cuisine_type_for_restaurants", "get_restaurants_address",
    "get_rating_reviews_for_restaurants", "get_dietary_restrictions_for_all_restaurants",
    "get_contact_information_for_restaurants", "get_price_for_restaurants", "check_restaurant_opening_hours",
    "get_all_car_rental_companies_in_city", "get_car_types_available", "get_rating_reviews_for_car_rental",
    "get_car_fuel_options", "get_car_rental_address", "get_car_price_per_day", "get_flight_information",
]
_RESERVE = "books it under the user's name (the environment keeps one reservation record and overwrites it)"

ANNOTATIONS: dict[str, dict[str, Annotation]] = {
    "workspace": {**_EMAIL, **_CALENDAR, **_DRIVE},
    "travel": {
        **{name: _ro() for name in _TRAVEL_READS},
        "create_calendar_event": _CALENDAR["create_calendar_event"],
        "search_calendar_events": _ro(), "get_day_calendar_events": _ro(),
        "cancel_calendar_event": _CALENDAR["cancel_calendar_event"],
        "reserve_hotel": _write(destructive=True, open_world=True, note=_RESERVE),
        "reserve_car_rental": _write(destructive=True, open_world=True, note=_RESERVE),
        "reserve_restaurant": _write(destructive=True, open_world=True, note=_RESERVE),
        "send_email": _EMAIL["send_email"],
    },
    "banking": {
        "get_iban": _ro(), "get_balance": _ro(), "get_most_recent_transactions": _ro(),
        "get_scheduled_transactions": _ro(), "read_file": _ro(), "get_user_info": _ro(),
        "send_money": _write(destructive=False, open_world=True, note="pays any IBAN"),
        "schedule_transaction": _write(destructive=False, open_world=True, note="schedules a payment to any IBAN"),
        "update_scheduled_transaction": _write(destructive=True, open_world=True, note="rewrites a scheduled payment"),
        "update_password": _write(destructive=True, open_world=False, note="replaces the password"),
        "update_user_info": _write(destructive=True, open_world=False, note="overwrites the user's name and address"),
    },
    "slack": {
        "get_channels": _ro(), "read_channel_messages": _ro(), "read_inbox": _ro(), "get_users_in_channel": _ro(),
        "get_webpage": Annotation(read_only=True, open_world=True, note="fetches any URL (and logs the request)"),
        "add_user_to_channel": _write(destructive=False, open_world=False, note="adds a member to a channel"),
        "send_direct_message": _write(destructive=False, open_world=False, note="messages a workspace member"),
        "send_channel_message": _write(destructive=False, open_world=False, note="posts in a channel"),
        "invite_user_to_slack": _write(destructive=False, open_world=True, note="invites any email address"),
        "remove_user_from_slack": _write(destructive=True, open_world=False, note="removes a member"),
        "post_webpage": _write(destructive=True, open_world=True, note="publishes (or replaces) a page at any URL"),
    },
}

TRUSTED_SOURCES: dict[str, dict[str, str]] = {
    "workspace": {
        "search_contacts_by_name": "the user's address book (names and addresses only)",
        "search_contacts_by_email": "the user's address book (names and addresses only)",
        "get_current_day": "the clock",
    },
    "travel": {"get_user_information": "the user's own profile"},
    "banking": {
        "get_iban": "the user's own account number",
        "get_user_info": "the user's own profile",
        "get_balance": "the user's own balance",
    },
    "slack": {
        "get_users_in_channel": "the workspace's member directory",
    },
}
"""Per suite: tools whose results an operator would trust like the user's own words, and why.
Each returns the user's own data or a directory that outsiders cannot write into; `trusted.verify`
checks that no injection vector ever reaches their output. (Slack's `get_channels` is not trusted: a
channel's name is one of the suite's injection vectors, which `trusted.verify` found.)"""

_TEXT = "free text; where it goes is set by other arguments, which stay checked"
TEXT_ARGUMENTS: dict[str, dict[str, list[str]]] = {
    "workspace": {"send_email": ["subject", "body"], "create_calendar_event": ["title", "description", "location"],
                  "append_to_file": ["content"], "create_file": ["content"]},
    "travel": {"send_email": ["subject", "body"], "create_calendar_event": ["title", "description", "location"]},
    "banking": {"send_money": ["subject"], "schedule_transaction": ["subject"], "update_scheduled_transaction": ["subject"]},
    "slack": {"send_direct_message": ["body"], "send_channel_message": ["body"], "post_webpage": ["content"]},
}
"""`firewall.trusted_arguments` of the optional row `enforce+trusted+text` (not of `enforce+trusted`):
the free-text fields of each suite's acting tools (a message's subject and body, an event's title,
description and location, a file's content, a payment's subject). An operator may accept that a
tool result sets them, since the recipient, file, channel, IBAN, amount or URL they go to is still
checked; the price is that a fooled model can then write whatever an injection dictates (a phishing
link, a false claim) to people the user chose. The row measures that trade; `enforce+trusted`
leaves every argument checked, as a deployment should by default."""


def trusted_arguments(suite: str) -> list[dict[str, str]]:
    """`TEXT_ARGUMENTS[suite]` as `firewall.trusted_arguments` entries on the suite's node."""
    return [{"tool": tool, "argument": arg, "server": suite}
            for tool, args in TEXT_ARGUMENTS[suite].items() for arg in args]


def table_markdown() -> str:
    """The classification and trusted sources as a Markdown table per suite (for the results file)."""
    out: list[str] = []
    for suite, tools in ANNOTATIONS.items():
        out += [f"### {suite}", "", "| tool | readOnlyHint | destructiveHint | openWorldHint | trusted source | what it does |",
                "|---|---|---|---|---|---|"]
        for name, ann in tools.items():
            destructive = "" if ann.destructive is None else str(ann.destructive).lower()
            trusted = TRUSTED_SOURCES[suite].get(name, "")
            out.append(f"| `{name}` | {str(ann.read_only).lower()} | {destructive} | {str(ann.open_world).lower()} | "
                       f"{'yes: ' + trusted if trusted else ''} | {ann.note or 'reads only'} |")
        out.append("")
    return "\n".join(out)
