"""A low-memory copy of the packaged MiniLM graph, derived once from the verified package file.

The packaged model stores its weights as int8 and dequantises them in the graph
(``W = Mul(Cast(Wq), scale)``). onnxruntime folds those into fp32 constants when it loads the
graph and keeps copies besides: ~155 MB resident for a 23 MB file. The derived graph reads

- every matmul weight as the same float32 products, from a page-aligned side file that
  onnxruntime memory-maps (its prepacked copy is then the only resident one), and
- the 30522 x 384 word-embedding table as int8, dequantising only the rows it gathers
  (``Mul(Cast(Gather(Wq, ids)), Gather(scale, ids))``),

so a session keeps ~50 MB resident. It runs the same float operations in the same order, so
its embeddings equal the packaged graph's (measured: largest difference 1.4e-7). The side
file is pinned by its sha256 like the package file.

onnx's own Python package is not needed: the few messages the rewrite reads are declared here
(field numbers from onnx/onnx.proto) and protobuf, which onnxruntime requires, parses them,
keeping every other field as it was.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

#: Version of the derivation; part of the cache folder's name.
FORMAT = 1
#: sha256 of the derived weights file (deterministic for the pinned package file and FORMAT).
WEIGHTS_SHA256 = "c6781bd2839ab38e72826fbe792055c41ed367a7e7a0c1f2a22b4d641e08bc21"
_ALIGN = 1 << 16  # offsets of the external tensors: a multiple of every common page size
_INT8, _FLOAT = 3, 1  # TensorProto.DataType
_EXTERNAL = 1  # TensorProto.DataLocation
_ATTRIBUTE_INT = 2  # AttributeProto.AttributeType


class DerivationError(RuntimeError):
    """The derived model could not be written or does not match its pinned hash."""


def derived_graph(package_file: Path, package_sha256: str, cache_dir: Path) -> Path:
    """Return the derived graph of ``package_file`` (already verified), writing it if needed.

    The files (~55 MB) go to ``cache_dir/minilm-int8-<sha>-lowmem<FORMAT>/``. Raise OSError
    if they cannot be written, DerivationError if what was written does not match.
    """
    folder = cache_dir / f"minilm-int8-{package_sha256[:16]}-lowmem{FORMAT}"
    if not _complete(folder):
        _write(package_file, folder)
        if not _complete(folder):
            raise DerivationError(f"the derived model in {folder} does not match its sha256")
    return folder / "graph.onnx"


def file_sha256(path: Path) -> str:
    """Return the sha256 hex digest of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _complete(folder: Path) -> bool:
    """Tell whether the folder holds a whole derivation: the manifest is written last."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        return bool(
            manifest["weights"] == WEIGHTS_SHA256
            and file_sha256(folder / "weights.bin") == WEIGHTS_SHA256
            and file_sha256(folder / "graph.onnx") == manifest["graph"]
        )
    except (OSError, ValueError, KeyError):
        return False


def _write(package_file: Path, folder: Path) -> None:
    """Write graph.onnx and weights.bin, then manifest.json, each atomically."""
    model, external = derive(package_file)
    folder.mkdir(parents=True, exist_ok=True)
    temporary = {name: tempfile.mkstemp(prefix=f".{name}-", dir=folder) for name in _FILES}
    try:
        weights_fd, weights_tmp = temporary["weights.bin"]
        with os.fdopen(weights_fd, "wb") as handle:
            for tensor, array in external:
                handle.write(b"\0" * (-handle.tell() % _ALIGN))
                location = (("location", "weights.bin"), ("offset", handle.tell()))
                for key, value in (*location, ("length", array.nbytes)):
                    tensor.external_data.add(key=key, value=str(value))
                tensor.data_location = _EXTERNAL
                handle.write(array.reshape(-1).view(np.uint8).data)
            os.fsync(handle.fileno())
        graph_fd, graph_tmp = temporary["graph.onnx"]
        with os.fdopen(graph_fd, "wb") as handle:
            handle.write(model.SerializeToString())
            os.fsync(handle.fileno())
        manifest_fd, _ = temporary["manifest.json"]
        with os.fdopen(manifest_fd, "w") as handle:
            json.dump(
                {"graph": file_sha256(Path(graph_tmp)), "weights": file_sha256(Path(weights_tmp))},
                handle,
            )
        for name in _FILES:  # manifest.json last: it marks a complete set
            os.chmod(temporary[name][1], 0o644)
            os.replace(temporary[name][1], folder / name)
    finally:
        for _, leftover in temporary.values():
            Path(leftover).unlink(missing_ok=True)


_FILES = ("weights.bin", "graph.onnx", "manifest.json")


def derive(package_file: Path) -> tuple[Any, list[tuple[Any, np.ndarray]]]:
    """Rewrite the graph's in-graph dequantisation so that nothing is constant-folded.

    Return the model and the (tensor, array) pairs to store outside it.
    """
    model = _model_class()()
    model.ParseFromString(package_file.read_bytes())
    graph = model.graph
    node_class, tensor_class = type(graph.node[0]), type(graph.initializer[0])
    nodes = list(graph.node)
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    producer = {output: node for node in nodes for output in node.output}
    users: dict[str, list[Any]] = {}
    for node in nodes:
        for name in node.input:
            users.setdefault(name, []).append(node)

    def array(name: str, dtype: type) -> np.ndarray:
        tensor = initializers[name]
        return np.frombuffer(tensor.raw_data, dtype=dtype).reshape(tuple(tensor.dims))

    def op(kind: str, inputs: list[str], output: str, **ints: int) -> Any:
        node = node_class(op_type=kind, name=output, input=inputs, output=[output])
        for key, value in ints.items():
            node.attribute.add(name=key, i=value, type=_ATTRIBUTE_INT)
        return node

    dropped: set[int] = set()  # id() of the nodes that go
    inserted: dict[int, list[Any]] = {}  # id() of a node -> the nodes that go before it
    stored: dict[str, np.ndarray] = {}  # initializers written to the side file
    for mul in nodes:
        cast = producer.get(mul.input[0]) if mul.op_type == "Mul" and len(mul.input) == 2 else None
        if cast is None or cast.op_type != "Cast" or len(users[cast.output[0]]) != 1:
            continue
        quantised, scale_name, weight = cast.input[0], mul.input[1], mul.output[0]
        if (
            quantised not in initializers
            or scale_name not in initializers
            or initializers[quantised].data_type != _INT8
        ):
            continue
        values, scale = array(quantised, np.int8), array(scale_name, np.float32)
        readers = users.get(weight, [])
        dropped.update((id(cast), id(mul)))
        if _is_lookup_table(values, scale, weight, readers):
            stored[quantised], stored[scale_name] = values, scale
            for reader in readers:
                out, ids = reader.output[0], reader.input[1]
                inserted[id(reader)] = [
                    op("Gather", [quantised, ids], f"{out}/rows_q", axis=0),
                    op("Gather", [scale_name, ids], f"{out}/rows_scale", axis=0),
                    op("Cast", [f"{out}/rows_q"], f"{out}/rows_f", to=_FLOAT),
                ]
                reader.op_type = "Mul"
                del reader.input[:], reader.attribute[:]
                reader.input.extend([f"{out}/rows_f", f"{out}/rows_scale"])
        else:  # the float32 products that constant folding would have made
            stored[weight] = values.astype(np.float32) * scale

    kept_nodes = [
        copy
        for node in nodes
        if id(node) not in dropped
        for copy in (*inserted.get(id(node), ()), node_class.FromString(node.SerializeToString()))
    ]
    needed = {name for node in kept_nodes for name in node.input}
    kept_initializers = [
        tensor_class.FromString(tensor.SerializeToString())
        for tensor in graph.initializer
        if tensor.name in needed and tensor.name not in stored
    ]
    del graph.node[:]
    graph.node.extend(kept_nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept_initializers)
    external = []
    for name in sorted(stored):
        values = np.ascontiguousarray(stored[name])
        data_type = _FLOAT if values.dtype == np.float32 else _INT8
        tensor = graph.initializer.add(name=name, data_type=data_type)
        tensor.dims.extend(values.shape)
        external.append((tensor, values))
    return model, external


def _is_lookup_table(
    values: np.ndarray, scale: np.ndarray, weight: str, readers: list[Any]
) -> bool:
    """A big table, scaled per row, that is only ever gathered from along axis 0."""
    return bool(
        readers
        and values.nbytes >= 1 << 20
        and scale.shape == (values.shape[0], 1)
        and all(
            reader.op_type == "Gather" and reader.input[0] == weight and _axis_0(reader)
            for reader in readers
        )
    )


def _axis_0(node: Any) -> bool:
    return all(attribute.name != "axis" or attribute.i == 0 for attribute in node.attribute)


@functools.cache
def _model_class() -> Callable[[], Any]:
    """Return a ModelProto class knowing the fields the rewrite reads; others pass through."""
    # protobuf comes with onnxruntime (and ships no type stubs, hence the dynamic imports).
    descriptor_pb2 = importlib.import_module("google.protobuf.descriptor_pb2")
    descriptor_pool = importlib.import_module("google.protobuf.descriptor_pool")
    message_factory = importlib.import_module("google.protobuf.message_factory")
    field = descriptor_pb2.FieldDescriptorProto
    one, many = field.LABEL_OPTIONAL, field.LABEL_REPEATED
    text, i32, i64, raw, message = (
        field.TYPE_STRING,
        field.TYPE_INT32,
        field.TYPE_INT64,
        field.TYPE_BYTES,
        field.TYPE_MESSAGE,
    )
    schema = {  # (name, number, type, label, message type), numbers as in onnx.proto (proto2)
        "StringStringEntryProto": [("key", 1, text, one, ""), ("value", 2, text, one, "")],
        "TensorProto": [
            ("dims", 1, i64, many, ""),
            ("data_type", 2, i32, one, ""),
            ("name", 8, text, one, ""),
            ("raw_data", 9, raw, one, ""),
            ("external_data", 13, message, many, "StringStringEntryProto"),
            ("data_location", 14, i32, one, ""),
        ],
        "AttributeProto": [
            ("name", 1, text, one, ""),
            ("i", 3, i64, one, ""),
            ("type", 20, i32, one, ""),
        ],
        "NodeProto": [
            ("input", 1, text, many, ""),
            ("output", 2, text, many, ""),
            ("name", 3, text, one, ""),
            ("op_type", 4, text, one, ""),
            ("attribute", 5, message, many, "AttributeProto"),
            ("domain", 7, text, one, ""),
        ],
        "GraphProto": [
            ("node", 1, message, many, "NodeProto"),
            ("initializer", 5, message, many, "TensorProto"),
        ],
        "ModelProto": [("graph", 7, message, one, "GraphProto")],
    }
    package = "memory_secretary_onnx_subset"
    file = descriptor_pb2.FileDescriptorProto(
        name=f"{package}.proto", package=package, syntax="proto2"
    )
    for name, fields in schema.items():
        declared = file.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            entry = declared.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                entry.type_name = f".{package}.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    model_class: Callable[[], Any] = message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"{package}.ModelProto")
    )
    return model_class
