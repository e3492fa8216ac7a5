"""The OpenAPI document says what the app does: its security schemes, and the refusals every
route can answer besides its own (a body refused by ``BodyGuard``, a database gone); and the app
holds to it where FastAPI would not (a query parameter of one value given twice).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from store.api.auth import authenticate, presented_key
from store.api.deps import api_state
from store.api.errors import ApiError
from store.api.responses import ErrorOut
from store.schemas import Limits

SECURITY_SCHEMES = {
    "bearerAuth": {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key from [[api.keys]]: `Authorization: Bearer KEY`.",
    },
    "apiKeyAuth": {
        "type": "apiKey",
        "in": "header",
        "name": "X-API-Key",
        "description": "The same key in a header of its own.",
    },
}
# Either header will do.
SECURITY: list[dict[str, list[str]]] = [{"bearerAuth": []}, {"apiKeyAuth": []}]

_ERROR = {"$ref": "#/components/schemas/ErrorOut"}
_WHY = {
    "400": "The body is not UTF-8 JSON, or holds NaN or an infinity.",
    "401": "No API key, or an unknown one.",
    "413": "The body is larger than api.max_body_bytes.",
    "415": "The body is not declared as JSON (Content-Type: application/json).",
    "422": "A parameter or the body is invalid; each problem is named. Besides the sizes the "
    "schemas declare, an item's metadata may take at most ingest.max_metadata_bytes as JSON.",
    "503": "The database is unavailable; try again later.",
}


def install_openapi(app: FastAPI, *, keyed: bool, limits: Limits) -> None:
    """Make ``app.openapi()`` declare the key schemes and, on every ``/v1`` operation, the key
    it needs (when ``keyed``, i.e. keys are configured) and the refusals it can answer; and the
    sizes its request bodies may have (the store's ``limits``)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title, version=app.version, routes=app.routes, description=app.description
            )
            add_refusals(schema, keyed=keyed)
            declare_limits(schema, limits)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def add_refusals(schema: dict[str, Any], *, keyed: bool) -> None:
    """Add the security schemes and the common error responses to an OpenAPI document."""
    components = schema.setdefault("components", {})
    _integer_bounds(components.get("schemas", {}))
    components["securitySchemes"] = SECURITY_SCHEMES
    components.setdefault("schemas", {}).setdefault("ErrorOut", ErrorOut.model_json_schema())
    for path, operations in schema.get("paths", {}).items():
        for operation in operations.values():
            _parameters_are_never_null(operation)
        if not path.startswith("/v1/"):
            continue
        for operation in operations.values():
            codes = ["422", "503"]
            if keyed:
                operation["security"] = SECURITY
                codes.append("401")
            if "requestBody" in operation:
                codes += ["400", "413", "415"]
            responses = operation.setdefault("responses", {})
            for code in codes:
                content = {"application/json": {"schema": _ERROR}}
                responses.setdefault(code, {"description": _WHY[code], "content": content})


# The request bodies whose sizes the configured ingest limits bound (store.schemas.Limits).
_LIMITED = ("MemoryIn", "LogIn", "MemoryPatch")


def declare_limits(node: Any, limits: Limits) -> None:
    """Write the configured limits (``[ingest]``) into the request schemas, which pydantic
    cannot know: a memory's or line's content at most ``max_content_chars``, at most
    ``max_tags`` tags of ``max_tag_chars`` each, a batch of at most ``max_batch`` items. So a
    body the document calls valid is one the app takes (metadata's size in bytes, which JSON
    Schema cannot say, is in the 422 description)."""
    if isinstance(node, list):
        for item in node:
            declare_limits(item, limits)
        return
    if not isinstance(node, dict):
        return
    if node.get("title") in _LIMITED:
        properties = node.get("properties", {})
        for option in _options(properties.get("content"), "string"):
            option["maxLength"] = limits.max_content_chars
        for option in _options(properties.get("tags"), "array"):
            option["maxItems"] = limits.max_tags
            option.setdefault("items", {})["maxLength"] = limits.max_tag_chars
    if node.get("type") == "array" and node.get("items", {}).get("title") in _LIMITED:
        node["maxItems"] = limits.max_batch
    for value in node.values():
        declare_limits(value, limits)


def _options(schema: Any, kind: str) -> list[dict[str, Any]]:
    """The schema itself or those of its ``anyOf`` options that are of JSON type ``kind``."""
    if not isinstance(schema, dict):
        return []
    options = [schema, *schema.get("anyOf", ())]
    return [option for option in options if option.get("type") == kind]


_MAX_ID = 2**63 - 1


def _integer_bounds(node: Any) -> None:
    """Give integer bounds back as integers: FastAPI writes a model's bounds through floats, and
    2**63 - 1 (the largest id) would round up to 2**63, a value no id may have."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("minimum", "maximum") and isinstance(value, float) and value.is_integer():
                node[key] = min(int(value), _MAX_ID)
            else:
                _integer_bounds(value)
    elif isinstance(node, list):
        for item in node:
            _integer_bounds(item)


def _parameters_are_never_null(operation: dict[str, Any]) -> None:
    """An optional header or query parameter is absent or given, never ``null``: drop the
    ``null`` FastAPI adds to its type (a URL cannot carry one, so a client generated from the
    document, or a fuzzer, would send something else for it)."""
    for parameter in operation.get("parameters", ()):
        schema = parameter.get("schema", {})
        options = [o for o in schema.get("anyOf", ()) if o.get("type") != "null"]
        if parameter.get("in") in ("header", "query") and len(options) == 1:
            rest = {k: v for k, v in schema.items() if k != "anyOf"}
            parameter["schema"] = {**options[0], **rest}


def single_valued_query(request: Request) -> None:
    """Refuse a query parameter given more than once where the document declares one value
    (FastAPI would silently take the last). Raise ApiError 422 naming it."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    repeated = {name for name, _ in request.query_params.multi_items()}
    repeated = {name for name in repeated if len(request.query_params.getlist(name)) > 1}
    if not repeated:
        return
    app: FastAPI = request.app
    try:  # a caller without a valid key learns only that (401, from the route)
        authenticate(api_state(app).store.settings.api.keys, presented_key(request.headers))
    except ApiError:
        return
    operation = app.openapi()["paths"].get(route.path_format, {}).get(request.method.lower(), {})
    single = {
        parameter["name"]
        for parameter in operation.get("parameters", ())
        if parameter.get("in") == "query" and not _is_array(parameter.get("schema", {}))
    }
    if repeated & single:
        problems = [
            (f"query.{name}", "given more than once: it takes one value")
            for name in sorted(repeated & single)
        ]
        raise ApiError(422, "invalid request", problems)


def _is_array(schema: dict[str, Any]) -> bool:
    options = schema.get("anyOf", ()) or schema.get("oneOf", ())
    return schema.get("type") == "array" or any(_is_array(option) for option in options)
