"""The registry of mask strategies: ``get_engine(name, vocab, **options)``.

Names: ``naive`` (checks every token; the baseline and the test oracle), and, as
they land, ``outlines``, ``xgrammar``, ``llguidance`` (our reimplementations) and
``peer:llguidance``, ``peer:xgrammar``, ``peer:outlines-core`` (the real engines,
from the optional ``[peers]`` extra; see :mod:`strategies.peers`).

An engine outside the registry can be named by its factory, ``"package.module:Factory"``
(called as ``Factory(vocab, **options)``), wherever an engine name is taken, or given a
name of its own: :func:`register`, the environment variable ``MASKLAB_ENGINES``
(``name=package.module:Factory``, comma-separated) or a package's entry point in the group
``masklab.strategies`` (``name = "package.module:Factory"``).  A registered engine is in
every list of engines (``masklab engines``, ``available_engines``) and in the conformance
suite (``tests/conformance``; see ``docs/extending.md``).  A factory
is a class that implements :class:`toolkit.core.protocol.MaskEngine` (subclass
:class:`toolkit.core.protocol.EngineBase` for the defaults of what the harness reads).
"""

from __future__ import annotations

import collections.abc
import inspect
import os
import re
import types
import typing
from collections.abc import Callable, Mapping
from importlib import import_module
from importlib.metadata import entry_points
from importlib.util import find_spec
from typing import Any

from strategies.declared import BUILT_IN, Declared
from toolkit.core.protocol import Capabilities, MaskEngine
from toolkit.core.vocab import Vocabulary, load_vocab

__all__ = [
    "check_options", "get_engine", "available_engines", "registered_engines", "register", "engine_factory",
    "engine_capabilities"]

_PLUGIN = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")

# name -> "module:factory"; imported on first use so optional peers cost nothing.
_REGISTRY: dict[str, str] = {
    "naive": "strategies.naive:NaiveEngine",
    "outlines": "strategies.outlines:OutlinesEngine",
    "llguidance": "strategies.llguidance:LLGuidanceEngine",
    "xgrammar": "strategies.xgrammar:XGrammarEngine",
    "glr": "strategies.glr:GLREngine",
    "peer:llguidance": "strategies.peers:LLGuidanceEngine",
    "peer:xgrammar": "strategies.peers:XGrammarEngine",
    "peer:outlines-core": "strategies.peers:OutlinesCoreEngine",
    "peer:llama.cpp": "strategies.peer_llamacpp:LlamaCppEngine",
    "peer:lm-format-enforcer": "strategies.peer_lmfe:LMFormatEnforcerEngine",
    "peer:glrmask": "strategies.peer_glrmask:GlrmaskEngine",
}
_BUILT_IN_TARGETS = dict(_REGISTRY)  # a built-in re-registered elsewhere is read from its factory


#: the environment variable of engines registered from outside: ``name=module:Factory,...``
ENV = "MASKLAB_ENGINES"
#: the entry-point group of engines that packages register
ENTRY_POINTS = "masklab.strategies"
_NAME = re.compile(r"[A-Za-z_][\w.:-]*")
_plugins_read = False


def register(name: str, target: str) -> None:
    """Register an engine factory given as ``"module:callable"`` under ``name``
    (ValueError for a malformed one; a name already registered is replaced)."""
    if not _NAME.fullmatch(name) or not _PLUGIN.fullmatch(target):
        raise ValueError(f"register({name!r}, {target!r}): a name (letters, digits, '_', '.', ':', '-') "
                         "and a factory 'package.module:Factory'")
    _REGISTRY[name] = target


def _read_plugins() -> None:
    """Register the engines of ``MASKLAB_ENGINES`` and of the ``masklab.strategies``
    entry points (once, on the registry's first use)."""
    global _plugins_read
    if _plugins_read:
        return
    _plugins_read = True
    for ep in entry_points(group=ENTRY_POINTS):
        register(ep.name, ep.value)
    for entry in filter(None, (e.strip() for e in os.environ.get(ENV, "").split(","))):
        name, sep, target = entry.partition("=")
        try:
            if not sep:
                raise ValueError(entry)
            register(name.strip(), target.strip())
        except ValueError:
            _plugins_read = False  # told again on the next use, until it is fixed
            raise ValueError(f"{ENV}: {entry!r} is not name=package.module:Factory "
                             "(entries are comma-separated)") from None


def registered_engines() -> list[str]:
    """Every registered name, whether or not its dependencies are installed
    (``MASKLAB_ENGINES`` and entry points included)."""
    _read_plugins()
    return sorted(_REGISTRY)


def _unknown(name: str) -> ValueError:
    return ValueError(
        f"unknown engine {name!r}; registered: {', '.join(registered_engines())} "
        "(or give 'package.module:Factory')"
    )


def engine_factory(name: str) -> Callable[..., MaskEngine]:
    """The callable that makes engine ``name`` (a registered name or
    ``"package.module:Factory"``); ValueError for an unknown one."""
    _read_plugins()
    target = _REGISTRY.get(name)
    plugin = target is None and _PLUGIN.fullmatch(name) is not None
    if plugin:
        target = name  # "package.module:Factory", an engine outside the registry
    if target is None:
        raise _unknown(name)
    module, attr = target.split(":")
    try:
        mod = import_module(module)
    except ModuleNotFoundError as e:
        # "peer:xgrammer" reads as a plugin of a module "peer": a misspelt name, not a
        # missing dependency (which stays an ImportError, see available_engines).
        if plugin and e.name is not None and (module == e.name or module.startswith(e.name + ".")):
            raise _unknown(name) from None
        raise
    try:
        return getattr(mod, attr)
    except AttributeError:
        raise ValueError(f"engine {name!r}: module {module!r} has no {attr!r}") from None


def available_engines() -> list[str]:
    """Registered engines whose dependencies are installed on this machine.

    A factory lists the modules it imports when built in ``requires`` (the peers
    import their packages only then); each must be findable.
    """
    out = []
    for name in registered_engines():
        try:
            requires = _requires(name)
        except (ImportError, ValueError):  # not installed, or a plug-in's factory that is not there
            continue
        if all(find_spec(m) is not None for m in requires):
            out.append(name)
    return out


def _built_in(name: str) -> Declared | None:
    """A built-in's entry of :data:`strategies.declared.BUILT_IN` (its class reads the same
    one), read without importing it; None for any other engine, or for a built-in name
    registered to another factory."""
    if name in BUILT_IN and _REGISTRY.get(name) == _BUILT_IN_TARGETS[name]:
        return BUILT_IN[name]
    return None


def _requires(name: str) -> tuple[str, ...]:
    declared = _built_in(name)
    return declared.requires if declared else tuple(engine_factory(name).requires)


def engine_capabilities(name: str) -> Capabilities:
    """What engine ``name`` can do (:class:`~toolkit.core.protocol.Capabilities`), for a
    built-in without importing it; ImportError, ValueError as :func:`engine_factory`, and
    AttributeError for a factory that does not say."""
    declared = _built_in(name)
    return declared.capabilities if declared else engine_factory(name).capabilities


def _hints(factory: Callable[..., Any], params: Mapping[str, inspect.Parameter]) -> dict[str, Any]:
    """Each keyword parameter's annotation as a type, resolved in the factory's module
    (annotations are text under ``from __future__ import annotations``); one that does
    not resolve is left out (its engine checks that option itself)."""
    target = factory.__init__ if inspect.isclass(factory) else factory
    scope = {**vars(typing), **getattr(target, "__globals__", {})}
    out: dict[str, Any] = {}
    for key, p in params.items():
        ann = p.annotation
        if ann is inspect.Parameter.empty:
            continue
        try:
            out[key] = eval(ann, scope) if isinstance(ann, str) else ann  # noqa: S307 - the factory's own annotation
        except Exception:  # noqa: BLE001 - a name only a type checker sees: left to the engine
            continue
    return out


def _fits(value: Any, tp: Any) -> bool | None:
    """Whether ``value`` is of the declared type ``tp``; None where ``tp`` is not one
    this check reads (the engine checks those values itself)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        verdicts = [_fits(value, a) for a in args]
        return True if any(verdicts) else None if None in verdicts else False
    if origin is typing.Literal:  # an enum: the value and its type (True is not 1)
        return any(value == a and type(value) is type(a) for a in args)
    if tp is type(None):
        return value is None
    if tp in (bool, int, float, str):
        if isinstance(value, bool):
            return tp is bool
        return isinstance(value, (int, float) if tp is float else tp)
    if origin in (list, tuple, collections.abc.Sequence) and not isinstance(value, str):
        if not isinstance(value, (list, tuple)):
            return False
        item = args[0] if args else Any
        return all(_fits(v, item) is not False for v in value)
    if origin in (dict, collections.abc.Mapping):
        if not isinstance(value, collections.abc.Mapping):
            return False
        kt, vt = args if len(args) == 2 else (Any, Any)
        return all(_fits(k, kt) is not False and _fits(v, vt) is not False for k, v in value.items())
    if origin in (list, tuple, collections.abc.Sequence):
        return False  # a str where a sequence is declared
    return None


def _describe(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if tp is type(None):
        return "None"
    if origin in (list, tuple, collections.abc.Sequence):
        return f"a list of {_describe(args[0]) if args else 'values'}"
    if origin in (dict, collections.abc.Mapping):
        return f"a mapping of {_describe(args[0])} to {_describe(args[1])}" if len(args) == 2 else "a mapping"
    return getattr(tp, "__name__", str(tp))


def check_options(name: str, options: Mapping[str, Any]) -> None:
    """Raise ValueError unless ``options`` are options of engine ``name``, each of its
    declared type: the factory's keyword parameters and their annotations (``bool``,
    ``int``, ``float``, ``str``, ``None``, enums as ``Literal[...]``, lists as
    ``Sequence[T]``/``list[T]``, mappings as ``Mapping[K, V]`` and unions of them: a
    string ``"False"`` is not a bool, ``"compat"`` is not one of ``"flexible"``,
    ``"compact"``; value ranges are the engine's own to check).  An unknown key lists
    the valid ones (a factory that takes ``**options`` passes unknown keys on: its
    engine checks them).  Nothing is built."""
    factory = engine_factory(name)
    sig = inspect.signature(factory).parameters
    params = {k: p for k, p in sig.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    forwards = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.values())  # a plugin passing them on
    hints = _hints(factory, params) if options else {}
    for key, value in options.items():
        p = params.get(key)
        if p is None and forwards:
            continue
        if p is None:
            valid = ", ".join(sorted(params)) or "none"
            raise ValueError(f"engine {name!r} has no option {key!r}; its options: {valid}")
        tp = hints.get(key)
        if tp is not None and _fits(value, tp) is False:
            raise ValueError(f"engine {name!r}: option {key!r} takes {_describe(tp)}, got {value!r}")


def get_engine(name: str, vocab: Any, **options: Any) -> MaskEngine:
    """Make the engine ``name`` for ``vocab`` (a :class:`Vocabulary`, a spec such as
    ``"tekken"``, or a tokenizer object: :func:`toolkit.core.vocab.load_vocab`);
    ``options`` are the engine's own, checked first (:func:`check_options`)."""
    check_options(name, options)
    return engine_factory(name)(vocab if isinstance(vocab, Vocabulary) else load_vocab(vocab), **options)
