"""The async client checked against the sync one: the same public methods, signatures,
docstrings and constructor, each async method awaitable and each sync one not.

``parity_problems`` lists every difference at once, each naming the method and what differs,
so a failure says exactly what to fix; the second test plants differences in two small
classes and sees each one reported, so a passing first test means something.

Where the two may differ, on purpose, the difference is spelled out here and nowhere else:

- ``RENAMED``: the async client is entered with ``async with`` and closed with ``aclose``;
- ``ANNOTATION_SWAPS``: each drives its own kind of httpx client;
- a sync generator returning ``Iterator[X]`` is an async generator returning
  ``AsyncIterator[X]``;
- a class docstring's summary line names the flavour ("A client" / "An asyncio client");
  the rest of it must match.

Otherwise the comparison is exact: annotations as the strings they are under
``from __future__ import annotations`` (so ``async def f() -> X`` matches ``def f() -> X``:
``async def`` does the wrapping), and docstrings after ``inspect.cleandoc`` with no
other normalisation.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, Self

import httpx

from secretary.client import AsyncSecretaryClient, SecretaryClient

# The sync name -> the async one, where the async protocol names the method differently.
RENAMED: Mapping[str, str] = {"__enter__": "__aenter__", "__exit__": "__aexit__", "close": "aclose"}

# (method, parameter) -> (the sync annotation, the async one), where the types differ on purpose.
ANNOTATION_SWAPS: Mapping[tuple[str, str], tuple[str, str]] = {
    ("__init__", "http_client"): ("httpx.Client | None", "httpx.AsyncClient | None"),
}

# The dunders compared besides the renamed ones.
COMPARED_DUNDERS = ("__init__",)


def public_methods(cls: type) -> set[str]:
    """The names of a class's methods that do not start with ``_``."""
    return {name for name, _ in inspect.getmembers(cls, inspect.isroutine) if name[0] != "_"}


def parity_problems(
    sync_cls: type,
    async_cls: type,
    *,
    renamed: Mapping[str, str] = RENAMED,
    annotation_swaps: Mapping[tuple[str, str], tuple[str, str]] = ANNOTATION_SWAPS,
) -> list[str]:
    """Every way ``async_cls`` differs from ``sync_cls`` beyond the allowed differences."""
    sync_name, async_name = sync_cls.__name__, async_cls.__name__
    problems = _class_doc_problems(sync_cls, async_cls)

    sync_public = public_methods(sync_cls)
    async_public = public_methods(async_cls)
    expected_async = {renamed.get(name, name): name for name in sync_public}
    problems += [
        f"{renamed.get(name, name)}: on {sync_name} (as {name}) but not on {async_name}"
        if renamed.get(name, name) != name
        else f"{name}: on {sync_name} but not on {async_name}"
        for name in sorted(sync_public)
        if renamed.get(name, name) not in async_public
    ]
    problems += [
        f"{name}: on {async_name} but not on {sync_name}"
        for name in sorted(async_public - expected_async.keys())
    ]

    pairs = [(name, name) for name in COMPARED_DUNDERS]
    pairs += [(sync, asyn) for sync, asyn in renamed.items() if sync.startswith("_")]
    pairs += [(expected_async[asyn], asyn) for asyn in sorted(async_public & expected_async.keys())]
    for sync, asyn in pairs:
        where = sync if sync == asyn else f"{sync}/{asyn}"
        sync_fn, async_fn = _own(sync_cls, sync), _own(async_cls, asyn)
        if sync_fn is None or async_fn is None:
            if sync_fn is not None:
                problems.append(f"{where}: {sync_name} has {sync} but {async_name} lacks {asyn}")
            elif async_fn is not None:
                problems.append(f"{where}: {async_name} has {asyn} but {sync_name} lacks {sync}")
            continue
        if sync != "__init__":
            problems += _kind_problems(where, sync_fn, async_fn)
        problems += _signature_problems(where, sync, sync_fn, async_fn, annotation_swaps)
        problems += _doc_problems(where, sync_fn, async_fn)
    return problems


def _own(cls: type, name: str) -> Callable[..., Any] | None:
    """The method ``name`` of ``cls``, unless it is absent or only ``object``'s."""
    method = getattr(cls, name, None)
    if method is None or method is getattr(object, name, None):
        return None
    return method  # type: ignore[no-any-return]


def _kind_problems(
    where: str, sync_fn: Callable[..., Any], async_fn: Callable[..., Any]
) -> list[str]:
    problems = []
    if inspect.iscoroutinefunction(sync_fn) or inspect.isasyncgenfunction(sync_fn):
        problems.append(f"{where}: the sync method is async")
    if inspect.isgeneratorfunction(sync_fn):
        if not inspect.isasyncgenfunction(async_fn):
            problems.append(f"{where}: a generator in sync but not an async generator in async")
    elif not inspect.iscoroutinefunction(async_fn):
        problems.append(f"{where}: the async method is not a coroutine function (async def)")
    return problems


def _signature_problems(
    where: str,
    method: str,
    sync_fn: Callable[..., Any],
    async_fn: Callable[..., Any],
    annotation_swaps: Mapping[tuple[str, str], tuple[str, str]],
) -> list[str]:
    sync_sig, async_sig = inspect.signature(sync_fn), inspect.signature(async_fn)
    problems = []
    if list(sync_sig.parameters) != list(async_sig.parameters):
        problems.append(
            f"{where}: parameters ({', '.join(sync_sig.parameters)}) in sync, "
            f"({', '.join(async_sig.parameters)}) in async"
        )
    for name, sync_param in sync_sig.parameters.items():
        async_param = async_sig.parameters.get(name)
        if async_param is None:
            continue
        if sync_param.kind != async_param.kind:
            problems.append(
                f"{where}: parameter {name!r} is {sync_param.kind.description} in sync, "
                f"{async_param.kind.description} in async"
            )
        if not _same_value(sync_param.default, async_param.default):
            problems.append(
                f"{where}: parameter {name!r} defaults to {_show(sync_param.default)} in sync, "
                f"{_show(async_param.default)} in async"
            )
        pair = (_annotation(sync_param.annotation), _annotation(async_param.annotation))
        allowed = annotation_swaps.get((method, name), (pair[0], pair[0]))
        if pair != allowed:
            problems.append(
                f"{where}: parameter {name!r} is annotated {pair[0]} in sync, {pair[1]} in async"
                + (f" (expected {allowed[1]})" if (method, name) in annotation_swaps else "")
            )
    problems += _return_problems(where, sync_fn, sync_sig, async_sig)
    return problems


def _return_problems(
    where: str,
    sync_fn: Callable[..., Any],
    sync_sig: inspect.Signature,
    async_sig: inspect.Signature,
) -> list[str]:
    sync_ret = _annotation(sync_sig.return_annotation)
    async_ret = _annotation(async_sig.return_annotation)
    if inspect.isgeneratorfunction(sync_fn) and sync_ret.startswith("Iterator["):
        expected = f"Async{sync_ret}"
    else:
        expected = sync_ret
    if async_ret == expected:
        return []
    if async_ret in (f"Awaitable[{sync_ret}]", f"Coroutine[Any, Any, {sync_ret}]"):
        # ``async def f() -> X`` already returns an awaitable of X; annotating the awaitable
        # would make it an awaitable of an awaitable.
        return [f"{where}: annotate the async return {sync_ret}, not {async_ret} (async def wraps)"]
    return [f"{where}: returns {sync_ret} in sync, {async_ret} in async (expected {expected})"]


def _doc_problems(
    where: str, sync_fn: Callable[..., Any], async_fn: Callable[..., Any]
) -> list[str]:
    sync_doc, async_doc = _doc(sync_fn.__doc__), _doc(async_fn.__doc__)
    if sync_doc == async_doc:
        return []
    return [f"{where}: docstring differs:\n  sync:  {sync_doc!r}\n  async: {async_doc!r}"]


def _class_doc_problems(sync_cls: type, async_cls: type) -> list[str]:
    """The class docstrings past their summary lines (which name the flavour) must match."""
    sync_body = _doc(sync_cls.__doc__).partition("\n")[2]
    async_body = _doc(async_cls.__doc__).partition("\n")[2]
    if sync_body == async_body:
        return []
    return [
        f"class docstring past its summary line differs:\n  sync:  {sync_body!r}\n"
        f"  async: {async_body!r}"
    ]


def _doc(doc: str | None) -> str:
    return "" if doc is None else inspect.cleandoc(doc)


def _annotation(annotation: object) -> str:
    if annotation is inspect.Parameter.empty:
        return "<none>"
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def _same_value(sync: object, asyn: object) -> bool:
    return sync is asyn or (type(sync) is type(asyn) and sync == asyn)


def _show(default: object) -> str:
    return "nothing" if default is inspect.Parameter.empty else repr(default)


def test_the_async_client_matches_the_sync_one() -> None:
    compared = public_methods(SecretaryClient)
    assert {"send", "search", "iter_memories", "close"} <= compared  # not vacuous
    problems = parity_problems(SecretaryClient, AsyncSecretaryClient)
    assert not problems, "the async client differs from the sync one:\n" + "\n".join(problems)


# -- the checker catches what it should ------------------------------------------------------


class _Sync:
    """A sync thing.

    It does things.
    """

    def __init__(self, url: str = "u", *, http_client: httpx.Client | None = None) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        pass

    def close(self) -> None:
        pass

    def fetch(self, key: str, *, limit: int = 10) -> int:
        """Fetch one thing."""
        return limit

    def each(self) -> Iterator[int]:
        """Every thing."""
        yield 1

    def count(self, *, flag: bool = False) -> int:
        return 0

    def ready(self) -> bool:
        return True


class _Async:
    """An async thing.

    It does things.
    """

    def __init__(self, url: str = "u", *, http_client: httpx.AsyncClient | None = None) -> None:
        pass

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        pass

    async def aclose(self) -> None:
        pass

    async def fetch(self, key: str, *, limit: int = 10) -> int:
        """Fetch one thing."""
        return limit

    async def each(self) -> AsyncIterator[int]:
        """Every thing."""
        yield 1

    async def count(self, *, flag: bool = False) -> int:
        return 0

    async def ready(self) -> bool:
        return True


class _SyncPlanted(_Sync):
    """A sync thing.

    It does things.
    """

    def only_sync(self) -> None:
        pass


class _AsyncPlanted(_Async):
    """An async thing.

    It does other things.
    """

    def __init__(self, url: str = "v", *, http_client: httpx.Client | None = None) -> None:
        pass

    async def __aexit__(self) -> None:  # type: ignore[override]
        pass

    async def fetch(self, key: str, *, limit: int = 20) -> int:
        """Fetch one thing, awaited."""
        return limit

    def each(self) -> Iterator[int]:  # type: ignore[override]
        """Every thing."""
        yield 1

    async def count(self, flag: bool = False) -> Awaitable[int]:  # type: ignore[override]
        raise NotImplementedError

    def ready(self) -> bool:  # type: ignore[override]
        return True

    async def only_async(self) -> None:
        pass


def test_the_checker_reports_every_planted_difference() -> None:
    assert parity_problems(_Sync, _Async) == []
    assert parity_problems(_SyncPlanted, _AsyncPlanted) == [
        "class docstring past its summary line differs:\n  sync:  '\\nIt does things.'\n"
        "  async: '\\nIt does other things.'",
        "only_sync: on _SyncPlanted but not on _AsyncPlanted",
        "only_async: on _AsyncPlanted but not on _SyncPlanted",
        "__init__: parameter 'url' defaults to 'u' in sync, 'v' in async",
        "__init__: parameter 'http_client' is annotated httpx.Client | None in sync, "
        "httpx.Client | None in async (expected httpx.AsyncClient | None)",
        "__exit__/__aexit__: parameters (self, kind, exc, tb) in sync, (self) in async",
        "count: parameter 'flag' is keyword-only in sync, positional or keyword in async",
        "count: annotate the async return int, not Awaitable[int] (async def wraps)",
        "each: a generator in sync but not an async generator in async",
        "each: returns Iterator[int] in sync, Iterator[int] in async (expected AsyncIterator[int])",
        "fetch: parameter 'limit' defaults to 10 in sync, 20 in async",
        "fetch: docstring differs:\n  sync:  'Fetch one thing.'\n"
        "  async: 'Fetch one thing, awaited.'",
        "ready: the async method is not a coroutine function (async def)",
    ]
