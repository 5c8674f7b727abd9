"""Scrubbing finds a secret however it is spelled cheaply (issue 32, remainder #9; G6, B4, F4).

Scrubbing caught the plain value and its base64, reversed, hex, URL and JSON forms only: a server
echoing its credential spaced out, dashed, upper-cased, in rot13, base32, base64 twice, as HTML
character references or `\\u` escapes handed it to every caller of the connection. Now a secret is
found through its letters (case-folded, any separators between them) in each of those forms, and
the whole place that spells it is replaced, the text around it left as it was.
"""

from __future__ import annotations

import base64
import codecs
import html
import json
import logging
import random
import re
import string
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from gateway.bridge.audit_args import reduce_args
from gateway.logs import JsonFormatter
from gateway.secrets import SecretSet
from tests.support import canary
from tests.support.bridge_servers import bridge_over, mcp_http
from tests.support.http_server import ServerThread

TOKEN = canary.CONNECTION_TOKEN
FILLER = "#" * len(TOKEN)
"""Stands where the secret was, to find which part of an encoded text depends on the secret."""

Encode = Callable[[str], str]


def html_mixed(text: str) -> str:
    """Every other character a hex character reference (`&#x74;`), the rest plain."""
    return "".join(f"&#x{ord(c):x};" if i % 2 else c for i, c in enumerate(text))


def html_padded(text: str) -> str:
    """Every character a zero-padded decimal reference without its `;`, separators named."""
    return "".join("&hyphen;" if c == "-" else f"&#{ord(c):07d}" for c in text)


def twice(inner: str, outer: str, url_safe: bool = False) -> Encode:
    """base64 of (`outer` + base64 of (`inner` + text)): every alignment of either layer."""
    encode = base64.urlsafe_b64encode if url_safe else base64.b64encode
    return lambda text: encode((outer + encode((inner + text).encode()).decode()).encode()).decode()


FORMS: dict[str, tuple[Encode, int]] = {
    # name: (encoding of a whole text, characters at each end of the secret's part that may mix in
    # its neighbours' bits and so are left: 0 for a character-by-character spelling)
    "spaced": (lambda text: " ".join(text), 0),
    "dashed upper-case": (lambda text: "-".join(text.upper()), 0),
    "separator runs": (lambda text: ", \n".join(text[i: i + 3] for i in range(0, len(text), 3)), 0),
    "upper-case": (str.upper, 0),
    "swapped case": (str.swapcase, 0),
    "rot13": (lambda text: codecs.encode(text, "rot13"), 0),
    "rot13 spaced": (lambda text: " ".join(codecs.encode(text, "rot13")), 0),
    "hex with colons": (lambda text: ":".join(f"{b:02X}" for b in text.encode()), 0),
    "html hex references mixed with plain": (html_mixed, 0),
    "html decimal references zero-padded": (html_padded, 0),
    "\\u escapes": (lambda text: "".join(f"\\u{ord(c):04x}" for c in text), 0),
    "\\u{} and \\x escapes mixed": (
        lambda text: "".join(f"\\u{{{ord(c):x}}}" if i % 3 else f"\\x{ord(c):02X}" for i, c in enumerate(text)), 0
    ),
    "%XX of every character": (lambda text: "".join(f"%{ord(c):02x}" for c in text), 0),
    **{f"base32 after {n} bytes": ((lambda n: lambda text: base64.b32encode(("x" * n + text).encode()).decode())(n), 2)
       for n in range(5)},
    **{f"base64 twice, alignments {i},{o}": (twice("ab"[:i], "cd"[:o]), 3) for i in range(3) for o in range(3)},
    "base64 twice, URL-safe": (twice("a", "", url_safe=True), 3),
}


def secret_part(encode: Encode, around: tuple[str, str]) -> tuple[str, int, int]:
    """`encode(before + TOKEN + after)`, and where in it the characters that depend on the secret
    start and end (found by encoding `FILLER` in its place)."""
    before, after = around
    text, clean = encode(before + TOKEN + after), encode(before + FILLER + after)
    start = next(i for i, (a, b) in enumerate(zip(text, clean)) if a != b)
    end = len(text) - next(i for i, (a, b) in enumerate(zip(reversed(text), reversed(clean))) if a != b)
    return text, start, end


SLACK = 8
"""How far past the secret's own characters a replacement may reach: the start of an escape
(`&#x`, `\\u00`, `%`), a `;`, base64 padding."""


def replaced_whole(scrubbed: str, text: str, start: int, end: int, edge: int) -> str | None:
    """None when `scrubbed` is `text` with one span covering [start, end) (but for `edge`
    characters at either end, and reaching at most `SLACK` past it) replaced by `[redacted]`, the
    rest unchanged; else what is wrong."""
    if scrubbed.count("[redacted]") != 1:
        return f"{scrubbed.count('[redacted]')} redactions in {canary.describe(scrubbed)[:300]!r}"
    head, tail = scrubbed.split("[redacted]")
    if not (text.startswith(head) and text.endswith(tail)):
        return "the text around the secret changed"
    kept_until, kept_from = len(head), len(text) - len(tail)
    if kept_until > start + edge or kept_from < end - edge:
        return f"part of the secret was left: kept [0, {kept_until}) and [{kept_from}, ...), secret in [{start}, {end})"
    if kept_until < start - SLACK or kept_from > end + SLACK:
        return f"more than the secret's span was replaced: [{kept_until}, {kept_from}), secret in [{start}, {end})"
    return None


def scrubber() -> SecretSet:
    secrets = SecretSet()
    for value in (TOKEN, canary.UPSTREAM_KEY, canary.MCP_CREDENTIAL):
        secrets.add(value)
    return secrets


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_secret_in_each_form_is_replaced_whole_and_the_text_around_it_kept(form: str) -> None:
    # R: G6, B4
    encode, edge = FORMS[form]
    text, start, end = secret_part(encode, ('{"headers": {"x-api-token": "', '", "host": "h"}}'))
    problem = replaced_whole(scrubber().scrub(text), text, start, end, edge)
    assert problem is None, problem


SEPARATORS = [" ", "-", "_", ".", ", ", "\n", "—", "é", "&amp;", "&#45;", "\\u002d", "%20", "&hyphen;", "", "", ""]


def spelled_at_random(form: str, rng: random.Random) -> str:
    """`form` with each letter in either case, plain or escaped in one of the ways scrubbing
    decodes, and a separator (or none) after each character."""
    def spell(char: str) -> str:
        if not char.isalnum():
            return char
        char = rng.choice([char.lower(), char.upper()])
        return rng.choice([
            char, char, char, f"&#x{ord(char):0{rng.randrange(1, 6)}x};", f"&#{ord(char):0{rng.randrange(1, 6)}d};",
            f"\\u{ord(char):04x}", f"\\x{ord(char):02X}", f"%{ord(char):02x}", f"\\u{{{ord(char):x}}}",
        ])
    return "".join(spell(char) + rng.choice(SEPARATORS) for char in form)


def letters(text: str) -> str:
    """The ASCII letters and digits of `text`, lower-cased (the test's own, not the product's)."""
    return re.sub("[^A-Za-z0-9]", "", text).lower()


def unescaped(text: str) -> str:
    """`text` with `\\u{…}`, `\\uXXXX`, `\\xXX`, `%XX` and HTML references decoded (the standard
    library's `html.unescape`)."""
    code = re.compile(r"\\u\{([0-9a-fA-F]+)\}|\\u([0-9a-fA-F]{4})|\\x([0-9a-fA-F]{2})|%([0-9a-fA-F]{2})")
    return html.unescape(code.sub(lambda m: chr(int(next(g for g in m.groups() if g), 16)), text))


def test_a_secret_spelled_at_random_never_survives_scrubbing() -> None:
    # R: G6, B4 (300 seeded spellings mixing case, escapes and separators in each form)
    rng = random.Random(32)
    encodings: list[Encode] = [
        lambda text: text, lambda text: text[::-1], lambda text: codecs.encode(text, "rot13"),
        lambda text: text.encode().hex(), lambda text: base64.b64encode(text.encode()).decode(),
        lambda text: base64.b32encode(text.encode()).decode(),
    ]
    secrets = scrubber()
    for _ in range(300):
        form = rng.choice(encodings)(rng.choice([TOKEN, canary.UPSTREAM_KEY]))
        before = "".join(rng.choice(string.ascii_letters + " ,.") for _ in range(rng.randrange(30)))
        scrubbed = secrets.scrub(before + " " + spelled_at_random(form, rng) + " after")
        needle = letters(form)[:-2]  # base64/base32: the last characters may mix in what follows
        assert scrubbed.startswith(before) and "[redacted]" in scrubbed
        assert needle not in letters(scrubbed) and needle not in letters(unescaped(scrubbed))


ORDINARY = [
    "The tool returned 3 issues: #12 (open), #13 (closed) and #14 — see https://example.com/a?b=1&c=%20x.",
    json.dumps({"title": "café — naïve résumé", "body": "東京 <b>&amp;</b> \\u00e9", "sha": "9f86d081884c7d65"}),
    "<p>Tom &amp; Jerry &#8212; &#x2014; &hyphen; &fjlig; \\x41\\u0042 %43</p>",
    base64.b64encode(bytes(range(256)) * 4).decode(),
    "-".join(f"{b:02x}" for b in bytes(range(200))),
    # near-misses: the secret's first characters (all but the last) spaced, escaped, encoded
    " ".join(TOKEN[:-1]) + " | " + html_mixed(TOKEN[:-1]) + " | " + codecs.encode(TOKEN[:-1], "rot13"),
]


@pytest.mark.parametrize("text", ORDINARY, ids=range(len(ORDINARY)))
def test_ordinary_text_and_near_misses_are_left_exactly_as_they_were(text: str) -> None:
    # R: G6
    assert scrubber().scrub(text) == text


def test_a_short_secret_is_still_matched_only_as_written() -> None:
    # R: G6 (the policy for short values is kept: under 8 letters, no case-folding or separators)
    secrets = SecretSet()
    secrets.add("k9-x2")
    assert secrets.scrub("key k9-x2.") == "key [redacted]."
    assert secrets.scrub("K9-X2 k 9 x 2 k9x2") == "K9-X2 k 9 x 2 k9x2"


def test_a_json_text_stays_json_when_the_secret_runs_into_an_escape() -> None:
    # R: G6 (error bodies and log lines are scrubbed as JSON text: no escape may be cut in two)
    hexed = TOKEN.encode().hex()
    body = '{"error": {"message": "got \\u00' + hexed + ' back, and \\n' + TOKEN + '"}}'  # \u0074… : "t" + the rest
    assert json.loads(scrubber().scrub(body)) == {"error": {"message": "got [redacted] back, and \n[redacted]"}}


def adversarial(size: int) -> str:
    """Near-misses of the secret, each missing its last character, spelled with separator runs,
    escapes and zero-padded references; unfinished escapes; repeated to `size` characters."""
    head = TOKEN[:-1]
    unit = (" ".join(head) + " " + "-" * 64 + " " + html_mixed(head) + "&#x" + "0" * 40
            + " \\u00 %4 " + "\\u0" + head + " ")
    return (unit * (size // len(unit) + 1))[:size]


def test_a_megabyte_built_against_the_scrubber_is_scrubbed_whole() -> None:
    # R: G6 (linear by construction: gateway/secret_forms.py says why; no timing is asserted)
    noise = adversarial(1 << 20)
    spelled = "".join(f"&#x{ord(c):06x};" if i % 2 else f" {c}" for i, c in enumerate(TOKEN))  # " t&#x000067; c..."
    assert scrubber().scrub(noise + spelled + " end") == noise + " [redacted] end"


@pytest.fixture(scope="module")
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    server = MCPServer("credential-echo")

    def received(ctx: Context) -> str:
        request = ctx.request_context.request
        return request.headers.get(canary.CONNECTION_HEADER, "") if request is not None else ""

    @server.tool()
    async def credential(form: str, ctx: Context) -> str:
        """The credential this server was sent, in `form`, inside a sentence."""
        return FORMS[form][0](f"you sent me {received(ctx)} and I kept it")

    @server.tool()
    async def refuse(ctx: Context) -> str:
        raise ToolError(f"refused: {'-'.join(received(ctx).upper())} is not allowed here")

    base_dir = tmp_path_factory.mktemp("encodings")
    app = server.streamable_http_app()
    with bridge_over(app, base_dir, connection="echo", owner="org:acme", bridge="acme") as running:
        yield running


async def call(bridge: ServerThread, name: str, arguments: dict[str, Any]) -> Any:
    async with Client(streamable_http_client(f"{bridge.url}/mcp", http_client=mcp_http("alice-key"))) as client:
        return await client.call_tool(name, arguments)


@pytest.mark.parametrize("form", sorted(FORMS))
async def test_a_connection_echoing_its_credential_in_any_form_never_shows_it_to_a_caller(
    bridge: ServerThread, form: str
) -> None:
    # R: B4, F3, G6 (an org connection's credential, echoed by its own server, through /mcp)
    result = await call(bridge, "echo__credential", {"form": form})
    encode, edge = FORMS[form]
    text, start, end = secret_part(encode, ("you sent me ", " and I kept it"))
    problem = replaced_whole(result.content[0].text, text, start, end, edge)
    assert problem is None, problem
    structured = result.structured_content
    if structured is not None:
        assert replaced_whole(structured["result"], text, start, end, edge) is None


async def test_a_tool_error_spelling_the_credential_dashed_is_scrubbed(bridge: ServerThread) -> None:
    # R: G6, B4
    result = await call(bridge, "echo__refuse", {})
    assert result.is_error
    assert result.content[0].text.endswith("refused: [redacted] is not allowed here")


def test_an_argument_spelling_a_secret_with_separators_is_not_kept_in_the_audit() -> None:
    # R: F4 (values that hold a secret are dropped, whatever their spelling)
    spaced = " ".join(TOKEN.upper())
    reduced = reduce_args({"query": spaced, "owner": "acme"}, scrub=scrubber().scrub)
    assert reduced == {"query": {"type": "string", "length": len(spaced)}, "owner": "acme"}


def test_a_log_line_holding_the_secret_in_rot13_or_base32_is_scrubbed() -> None:
    # R: G6, G9
    record = logging.makeLogRecord({
        "name": "toolgate.test", "levelname": "WARNING", "levelno": logging.WARNING,
        "msg": "upstream said %s / %s",
        "args": (codecs.encode(canary.UPSTREAM_KEY, "rot13"), base64.b32encode(canary.UPSTREAM_KEY.encode()).decode()),
    })
    message = json.loads(JsonFormatter(scrubber()).format(record))["message"]
    assert message.startswith("upstream said [redacted] / [redacted]") and len(message) < 50
