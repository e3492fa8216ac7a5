"""Tests for store.vector.embedder: offline MiniLM parity and the litellm-backed embedder."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from store.vector import embedder as embedder_module
from store.vector import onnx_lowmem
from store.vector.embedder import (
    Embedder,
    EmbedderError,
    LiteLLMEmbedder,
    OnnxMiniLMEmbedder,
    make_embedder,
)
from tests.helpers.openai_server import (
    EMBEDDINGS,
    ScriptedOpenAIServer,
    ScriptedReply,
    embeddings_body,
    scripted_vector,
)

REFERENCE_PATH = (
    Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "minilm-reference.json"
)
REMOTE_MODEL = "openai/text-embedding-3-small"


# -- fixtures ---------------------------------------------------------------


@pytest.fixture(scope="module")
def onnx_embedder() -> OnnxMiniLMEmbedder:
    """One loaded model for the module (loading takes ~0.3 s)."""
    return OnnxMiniLMEmbedder(batch_size=4, threads=2)


@pytest.fixture
def litellm_fail_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the openai client inside litellm give up at once (it retries twice by default)."""
    litellm = embedder_module._import_litellm()
    monkeypatch.setattr(litellm, "DEFAULT_MAX_RETRIES", 0)


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(embedding_dim=12) as running:
        yield running


def _cosines(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Row-wise cosine similarity."""
    return np.asarray((a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- OnnxMiniLMEmbedder -----------------------------------------------------


def test_onnx_embedder_reference_texts_match_sentence_transformers(
    onnx_embedder: OnnxMiniLMEmbedder, record_property: Any
) -> None:
    if not REFERENCE_PATH.is_file():
        pytest.skip(f"reference embeddings not found at {REFERENCE_PATH.resolve()}")
    items = json.loads(REFERENCE_PATH.read_text(encoding="utf-8"))["items"]
    expected = np.asarray([item["embedding"] for item in items], dtype=np.float32)

    got = onnx_embedder.embed([item["text"] for item in items])

    cosines = _cosines(got, expected)
    mean, worst = float(cosines.mean()), float(cosines.min())
    record_property("mean_cosine", mean)
    record_property("min_cosine", worst)
    print(f"MiniLM parity over {len(items)} texts: mean cosine {mean:.6f}, min {worst:.6f}")
    assert got.shape == expected.shape
    assert mean >= 0.999, f"mean cosine {mean:.6f} (min {worst:.6f})"
    # int8 weights cost most on the shortest inputs (e.g. ""); a floor catches a broken pipeline.
    assert worst >= 0.99, f"min cosine {worst:.6f} (mean {mean:.6f})"


@pytest.fixture(scope="module")
def lowmem_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("model-cache")


def test_onnx_embedder_derived_graph_equals_packaged_graph(
    onnx_embedder: OnnxMiniLMEmbedder, lowmem_cache: Path
) -> None:
    texts = ["hello", "", "Caroline went to an LGBTQ support group.", "word " * 300]
    derived = OnnxMiniLMEmbedder(batch_size=4, threads=2, cache_dir=lowmem_cache)

    got = derived.embed(texts)

    np.testing.assert_allclose(got, onnx_embedder.embed(texts), atol=1e-5)
    folder = next(lowmem_cache.iterdir())
    assert sorted(p.name for p in folder.iterdir()) == [
        "graph.onnx",
        "manifest.json",
        "weights.bin",
    ]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["weights"] == onnx_lowmem.WEIGHTS_SHA256


def test_onnx_embedder_derived_graph_reused_then_rewritten_when_damaged(
    lowmem_cache: Path,
) -> None:
    OnnxMiniLMEmbedder(cache_dir=lowmem_cache).embed(["warm"])
    weights = next(lowmem_cache.iterdir()) / "weights.bin"
    written = weights.stat().st_mtime_ns
    OnnxMiniLMEmbedder(cache_dir=lowmem_cache).embed(["again"])
    assert weights.stat().st_mtime_ns == written  # reused, not derived again

    with weights.open("r+b") as handle:  # a torn or tampered file
        handle.seek(1 << 16)
        handle.write(b"\xff" * 64)
    vector = OnnxMiniLMEmbedder(cache_dir=lowmem_cache).embed(["hello"])
    assert onnx_lowmem.file_sha256(weights) == onnx_lowmem.WEIGHTS_SHA256
    np.testing.assert_allclose(vector, OnnxMiniLMEmbedder().embed(["hello"]), atol=1e-5)


def test_onnx_embedder_unwritable_cache_uses_packaged_graph(
    tmp_path: Path, onnx_embedder: OnnxMiniLMEmbedder
) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    embedder = OnnxMiniLMEmbedder(cache_dir=not_a_dir / "cache")

    np.testing.assert_allclose(embedder.embed(["hello"]), onnx_embedder.embed(["hello"]), atol=1e-6)


@pytest.mark.parametrize(
    ("lengths", "size", "expected"),
    [
        ([10, 10, 10, 10, 10], 2, [[0, 1], [2, 3], [4]]),  # the batch size caps short texts
        ([64] * 40, 64, [list(range(32)), list(range(32, 40))]),  # 32 x 64**2 = the cell cap
        ([20, 20, 256, 256, 256], 32, [[0, 1], [2, 3], [4]]),  # long texts go two by two
    ],
)
def test_batches_capped_by_size_and_attention_cells(
    lengths: list[int], size: int, expected: list[list[int]]
) -> None:
    assert list(embedder_module._batches(range(len(lengths)), lengths, size)) == expected


def test_onnx_embedder_any_texts_rows_unit_norm_float32(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    vectors = onnx_embedder.embed(["hello", "", "Ein ganz anderer Satz über Katzen.", "🙂 " * 40])

    assert vectors.dtype == np.float32
    assert vectors.shape == (4, onnx_embedder.dim) == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_onnx_embedder_empty_input_returns_zero_rows(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    vectors = onnx_embedder.embed([])

    assert vectors.shape == (0, 384)
    assert vectors.dtype == np.float32


def test_onnx_embedder_mixed_lengths_in_one_call_keep_input_order(
    onnx_embedder: OnnxMiniLMEmbedder,
) -> None:
    # Lengths interleaved so the length sort reorders across several batches of 4.
    texts = [
        "word " * 120,
        "short",
        "A medium sentence about the weather in Lisbon this week.",
        "",
        "x",
        "The quick brown fox jumps over the lazy dog. " * 5,
        "Caroline adopted a dog.",
        "long " * 60 + "ending",
        "Tea?",
    ]

    batched = onnx_embedder.embed(texts)
    one_by_one = np.vstack([onnx_embedder.embed([text]) for text in texts])

    assert np.all(_cosines(batched, one_by_one) > 0.9999)


def test_onnx_embedder_text_over_256_tokens_truncated_without_error(
    onnx_embedder: OnnxMiniLMEmbedder,
) -> None:
    head = "memory " * 300  # ~300 tokens: everything after token 254 is cut
    vectors = onnx_embedder.embed([head + "completely different tail about volcanoes", head])

    assert vectors.shape == (2, 384)
    assert np.all(np.isfinite(vectors))
    # Same first 256 tokens -> same vector: the tail was truncated away.
    assert float(_cosines(vectors[:1], vectors[1:])[0]) > 0.9999


def test_onnx_embedder_pinned_hash_mismatch_raises_embedder_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wrong = "0" * 64
    monkeypatch.setattr(embedder_module, "MODEL_SHA256", wrong)

    with pytest.raises(EmbedderError) as caught:
        OnnxMiniLMEmbedder(threads=1).embed(["anything"])

    message = str(caught.value)
    assert "model.onnx" in message
    assert wrong in message
    assert "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6" in message


def test_onnx_embedder_construction_does_not_load_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object) -> None:
        raise AssertionError("model loaded at construction")

    monkeypatch.setattr(embedder_module, "_load_session", refuse)

    embedder = OnnxMiniLMEmbedder()

    assert embedder.dim == 384
    assert embedder.model_id == "onnx:all-MiniLM-L6-v2-int8:8199be6f699a"
    assert isinstance(embedder, Embedder)


def test_onnx_embedder_bare_string_raises_type_error(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    with pytest.raises(TypeError):
        onnx_embedder.embed("not a list")


@pytest.mark.parametrize("kwargs", [{"batch_size": 0}, {"threads": 0}])
def test_onnx_embedder_nonpositive_settings_raise_value_error(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        OnnxMiniLMEmbedder(**kwargs)


# -- make_embedder ----------------------------------------------------------


def test_make_embedder_default_provider_returns_offline_onnx() -> None:
    embedder = make_embedder()

    assert isinstance(embedder, OnnxMiniLMEmbedder)


def test_make_embedder_unknown_provider_raises_embedder_error() -> None:
    with pytest.raises(EmbedderError, match=r"'sbert'.*onnx.*litellm"):
        make_embedder(provider="sbert")


def test_make_embedder_onnx_with_other_model_raises_embedder_error() -> None:
    with pytest.raises(EmbedderError, match="all-MiniLM-L6-v2"):
        make_embedder(provider="onnx", model="bge-small")


def test_make_embedder_litellm_without_model_raises_embedder_error() -> None:
    with pytest.raises(EmbedderError, match="needs a model"):
        make_embedder(provider="litellm")


def test_make_embedder_litellm_with_model_returns_litellm_embedder() -> None:
    embedder = make_embedder(
        provider="litellm", model=REMOTE_MODEL, api_base="http://127.0.0.1:1/v1"
    )

    assert isinstance(embedder, LiteLLMEmbedder)
    assert embedder.model_id == f"litellm:{REMOTE_MODEL}"


# -- LiteLLMEmbedder --------------------------------------------------------


@pytest.mark.usefixtures("litellm_fail_fast")
def test_litellm_embedder_scripted_server_returns_unit_vectors_of_scripted_dim(
    server: ScriptedOpenAIServer,
) -> None:
    texts = ["first text", "second, longer text", "third"]
    embedder = LiteLLMEmbedder(model=REMOTE_MODEL, api_base=server.api_base, api_key="x", timeout=5)

    vectors = embedder.embed(texts)

    assert vectors.shape == (3, 12)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    expected = np.asarray([scripted_vector(text, 12) for text in texts])
    assert np.all(_cosines(vectors, expected) > 0.99999)
    assert embedder.dim == 12
    assert [request.path for request in server.requests] == ["/v1/embeddings"]
    assert server.requests[0].body["input"] == texts


@pytest.mark.usefixtures("litellm_fail_fast")
def test_litellm_embedder_api_base_without_v1_hits_bare_embeddings_path(
    server: ScriptedOpenAIServer,
) -> None:
    embedder = LiteLLMEmbedder(model=REMOTE_MODEL, api_base=server.url, api_key="x", timeout=5)

    assert embedder.embed(["hello"]).shape == (1, 12)
    assert server.requests[0].path == "/embeddings"


@pytest.mark.usefixtures("litellm_fail_fast")
def test_litellm_embedder_unknown_dim_probes_server_once(server: ScriptedOpenAIServer) -> None:
    embedder = LiteLLMEmbedder(model=REMOTE_MODEL, api_base=server.api_base, api_key="x", timeout=5)

    assert embedder.dim == 12
    assert embedder.embed([]).shape == (0, 12)
    assert len(server.requests) == 1
    assert server.requests[0].body["input"] == ["dimension probe"]


@pytest.mark.usefixtures("litellm_fail_fast")
def test_litellm_embedder_server_500_raises_embedder_error(server: ScriptedOpenAIServer) -> None:
    server.enqueue(EMBEDDINGS, ScriptedReply(status=500, body={"error": {"message": "boom"}}))
    embedder = LiteLLMEmbedder(model=REMOTE_MODEL, api_base=server.api_base, api_key="x", timeout=5)

    with pytest.raises(EmbedderError) as caught:
        embedder.embed(["hello"])

    assert REMOTE_MODEL in str(caught.value)
    assert server.api_base in str(caught.value)


@pytest.mark.usefixtures("litellm_fail_fast")
def test_litellm_embedder_closed_port_raises_embedder_error() -> None:
    api_base = f"http://127.0.0.1:{_closed_port()}/v1"
    embedder = LiteLLMEmbedder(model=REMOTE_MODEL, api_base=api_base, api_key="x", timeout=2)

    with pytest.raises(EmbedderError, match=api_base):
        embedder.embed(["hello"])


@pytest.mark.usefixtures("litellm_fail_fast")
def test_litellm_embedder_slow_server_raises_embedder_error(server: ScriptedOpenAIServer) -> None:
    server.enqueue(EMBEDDINGS, ScriptedReply(delay=1.5))
    embedder = LiteLLMEmbedder(
        model=REMOTE_MODEL, api_base=server.api_base, api_key="x", timeout=0.3
    )

    with pytest.raises(EmbedderError, match=REMOTE_MODEL):
        embedder.embed(["hello"])


@pytest.mark.usefixtures("litellm_fail_fast")
def test_litellm_embedder_wrong_vector_count_raises_embedder_error(
    server: ScriptedOpenAIServer,
) -> None:
    server.enqueue(EMBEDDINGS, ScriptedReply(body=embeddings_body([[1.0, 0.0]])))
    embedder = LiteLLMEmbedder(model=REMOTE_MODEL, api_base=server.api_base, api_key="x", timeout=5)

    with pytest.raises(EmbedderError, match="1 vectors for 2 texts"):
        embedder.embed(["one", "two"])


@pytest.mark.usefixtures("litellm_fail_fast")
def test_litellm_embedder_dimension_change_raises_embedder_error(
    server: ScriptedOpenAIServer,
) -> None:
    embedder = LiteLLMEmbedder(model=REMOTE_MODEL, api_base=server.api_base, api_key="x", timeout=5)
    embedder.embed(["first"])
    server.enqueue(EMBEDDINGS, ScriptedReply(body=embeddings_body([[1.0, 0.0, 0.0]])))

    with pytest.raises(EmbedderError, match="from 12 to 3"):
        embedder.embed(["second"])


def test_onnx_embedder_runs_one_inference_at_a_time(
    onnx_embedder: OnnxMiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Inferences side by side each grew the runtime's memory (16 of a night's runs at once:
    # 150 -> 440 MB in one process); each one already uses every core.
    inner = OnnxMiniLMEmbedder._run
    lock = threading.Lock()
    at_once = [0, 0]  # now, most

    def counted(runtime: Any, encodings: Any) -> Any:
        with lock:
            at_once[0] += 1
            at_once[1] = max(at_once)
        try:
            time.sleep(0.01)  # long enough for the others to try
            return inner(runtime, encodings)
        finally:
            with lock:
                at_once[0] -= 1

    monkeypatch.setattr(OnnxMiniLMEmbedder, "_run", staticmethod(counted))
    texts = [f"a short text number {n}" for n in range(4)]
    threads = [threading.Thread(target=onnx_embedder.embed, args=(texts,)) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert at_once == [0, 1]
