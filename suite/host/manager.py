"""Plugin loading: built-ins, entry points, ``-p``, blocking; and the registry of records.

Built-in plugins are registered exactly like third-party ones: they are the
``ampsuite`` entry points of the ampsuite distribution itself, loaded first and
whether or not autoloading is on. Every failure becomes a :class:`PluginError`
whose one-line message names the plugin.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import importlib.metadata
import os
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pluggy

from ampsuite import PLUGIN_API, __version__
from ampsuite.contract.errors import PluginError
from ampsuite.contract.lazy import Lazy
from ampsuite.contract.plugin import Executor, Probe, Technique, Workload
from ampsuite.host import hookspecs
from ampsuite.host.records import check_record

ENTRY_POINT_GROUP = "ampsuite"
AUTOLOAD_ENV = "AMPSUITE_DISABLE_PLUGIN_AUTOLOAD"
PLUGINS_ENV = "AMPSUITE_PLUGINS"
HOOK_PREFIX = "ampsuite_"

__all__ = ["PluginInfo", "PluginSettings", "Registry", "load_registry"]


@dataclass(frozen=True)
class PluginSettings:
    """Which plugins to load; plain data so that workers load the same set.

    Attributes:
        extra: modules named with ``-p MODULE`` (or in ``$AMPSUITE_PLUGINS``).
        blocked: names given as ``-p no:NAME``.
        autoload: load the ``ampsuite`` entry points; ``$AMPSUITE_DISABLE_PLUGIN_AUTOLOAD``
            turns it off.
    """

    extra: tuple[str, ...] = ()
    blocked: tuple[str, ...] = ()
    autoload: bool = True

    @classmethod
    def from_args(
        cls, plugin_args: Sequence[str], env: os._Environ[str] | dict[str, str] | None = None
    ) -> PluginSettings:
        env = os.environ if env is None else env
        # The variable takes what -p takes, comma-separated, so that a plugin can be blocked for good.
        from_env = [m.strip() for m in env.get(PLUGINS_ENV, "").split(",") if m.strip()]
        extra: list[str] = []
        blocked: list[str] = []
        for arg in [*from_env, *plugin_args]:
            if arg.startswith("no:"):
                blocked.append(arg[3:])
            else:
                extra.append(arg)
        autoload = env.get(AUTOLOAD_ENV, "").strip().lower() in ("", "0", "false", "no")
        return cls(tuple(extra), tuple(blocked), autoload)

    def as_dict(self) -> dict[str, Any]:
        return {"extra": list(self.extra), "blocked": list(self.blocked), "autoload": self.autoload}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PluginSettings:
        return cls(tuple(data["extra"]), tuple(data["blocked"]), bool(data["autoload"]))


@dataclass(frozen=True)
class PluginInfo:
    """One loaded plugin: its registered name, module, version and where it came from."""

    name: str
    module: str
    version: str
    source: str
    """``builtin``, ``entry point (DIST)``, ``-p`` or ``$AMPSUITE_PLUGINS``."""


_R = TypeVar("_R", Workload, Technique, Probe, Executor)


@dataclass
class Registry:
    """Every record the loaded plugins contributed, by name, with the plugin that owns it."""

    manager: pluggy.PluginManager
    plugins: list[PluginInfo] = field(default_factory=list)
    workloads: dict[str, Workload] = field(default_factory=dict)
    techniques: dict[str, Technique] = field(default_factory=dict)
    probes: dict[str, Probe] = field(default_factory=dict)
    executors: dict[str, Executor] = field(default_factory=dict)
    owner: dict[tuple[str, str], str] = field(default_factory=dict)
    """(kind, record name) -> plugin name."""

    @property
    def hook(self) -> Any:
        return self.manager.hook

    def own_modules(self) -> list[str]:
        """ampsuite's own loaded plugin modules and the implementations their records name with
        :func:`ampsuite.lazy`, in load order: what the fork server preloads (third-party code is
        imported in the worker, where its errors are that cell's)."""
        found = [p.module for p in self.plugins if _is_own(p.module)]
        for records in (self.workloads, self.techniques, self.probes, self.executors):
            for record in records.values():
                for f in dataclasses.fields(record):
                    value = getattr(record, f.name)
                    if isinstance(value, Lazy) and _is_own(value.module):
                        found.append(value.module)
        return list(dict.fromkeys(found))

    def plugin_of(self, kind: str, name: str) -> PluginInfo:
        owner = self.owner[(kind, name)]
        return next(p for p in self.plugins if p.name == owner)


class _Manager(pluggy.PluginManager):
    """Treats any ``ampsuite_*`` attribute as a hook implementation, so a
    misspelled hook is caught by ``check_pending`` even without the marker."""

    def parse_hookimpl_opts(self, plugin: object, name: str) -> Any:
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is None and name.startswith(HOOK_PREFIX):
            attr = getattr(plugin, name, None)
            if callable(attr):
                return {}
        return opts


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _raised(exc: BaseException) -> str:
    """What a plugin's code raised, for a one-line message (sys.exit() included: it ends no ampsuite command)."""
    if isinstance(exc, SystemExit):
        return f"SystemExit: sys.exit({exc.code!r}) was called"
    return f"{type(exc).__name__}: {_one_line(str(exc))}"


def _import(name: str, module: str) -> types.ModuleType:
    try:
        return importlib.import_module(module)
    except (Exception, SystemExit) as exc:  # any error in third-party code is that plugin's fault
        raise PluginError(name, f"cannot import {module!r}: {_raised(exc)}") from exc


def _register(pm: pluggy.PluginManager, plugin: object, name: str) -> None:
    declared = getattr(plugin, "AMPSUITE_PLUGIN_API", PLUGIN_API)
    if declared != PLUGIN_API:
        raise PluginError(
            name,
            f"written for ampsuite plugin API {declared!r}, but this ampsuite ({__version__}) "
            f"provides API {PLUGIN_API}; upgrade the plugin or ampsuite",
        )
    try:
        pm.register(plugin, name=name)
    except pluggy.PluginValidationError as exc:
        raise PluginError(name, _one_line(str(exc))) from exc
    except ValueError as exc:  # pluggy: name or object already registered
        raise PluginError(name, _one_line(str(exc))) from exc


DISTRIBUTION = "ampsuite"


def _is_own(module: str) -> bool:
    return module.split(".", 1)[0] == DISTRIBUTION


def _is_builtin(ep: importlib.metadata.EntryPoint) -> bool:
    return ep.dist is not None and ep.dist.name.lower() == DISTRIBUTION


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    """The group's entry points, ampsuite's own (the built-ins) first, each part by name."""
    eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    return sorted(eps, key=lambda ep: (not _is_builtin(ep), ep.name))


def load_registry(settings: PluginSettings | None = None, objects: Sequence[tuple[str, object]] = ()) -> Registry:
    """Load plugins as ``settings`` say and collect their records.

    :param objects: extra (name, plugin object) pairs registered after the
        modules; they exist only in this process (tests, ``--in-process`` runs).

    :raises PluginError: for the first broken plugin, naming it (and, for an installed one that loads itself,
        how to leave it out: every command loads every plugin, so one broken package stops them all).
    """
    try:
        return _load_registry(settings or PluginSettings(), objects)
    except PluginError as exc:
        installed = {ep.name for ep in _entry_points() if not _is_builtin(ep)}
        if exc.plugin not in installed or "-p no:" in exc.message:
            raise
        raise PluginError(exc.plugin, f"{exc.message} (leave it out with -p no:{exc.plugin})") from exc


def _load_registry(settings: PluginSettings, objects: Sequence[tuple[str, object]]) -> Registry:
    pm = _Manager("ampsuite")
    pm.add_hookspecs(hookspecs)
    for name in settings.blocked:
        pm.set_blocked(name)
    registry = Registry(pm)

    def add(name: str, module: str, source: str, version: str | None = None) -> None:
        if pm.is_blocked(name) or pm.has_plugin(name):
            return
        # Import first: a module that cannot be imported is that plugin's error (PluginError),
        # and only an imported module can say its version.
        plugin = _import(name, module)
        if pm.is_registered(plugin):  # -p of a module that a built-in or entry point already loaded
            return
        _register(pm, plugin, name)
        registry.plugins.append(PluginInfo(name, module, version or _module_version(module, plugin), source))

    builtins = 0
    for ep in _entry_points():
        builtin = _is_builtin(ep)
        builtins += builtin
        if not (builtin or settings.autoload) or pm.is_blocked(ep.name) or pm.has_plugin(ep.name):
            continue
        dist = ep.dist.name if ep.dist else "?"
        version = ep.dist.version if ep.dist else "?"
        try:
            plugin = ep.load()
        except (Exception, SystemExit) as exc:
            raise PluginError(ep.name, f"cannot load entry point {ep.value!r}: {_raised(exc)}") from exc
        _register(pm, plugin, ep.name)
        source = "builtin" if builtin else f"entry point ({dist})"
        registry.plugins.append(PluginInfo(ep.name, ep.value, version, source))
    if not builtins:
        raise PluginError(
            DISTRIBUTION,
            f"the {DISTRIBUTION} distribution declares no {ENTRY_POINT_GROUP!r} entry points: its metadata is "
            f"missing or stale (a {DISTRIBUTION}.egg-info left in the current folder shadows the installed one); "
            "reinstall ampsuite",
        )
    for module in settings.extra:
        add(module, module, "-p")
    for name, obj in objects:
        if not pm.is_blocked(name):
            _register(pm, obj, name)
            module = getattr(obj, "__name__", type(obj).__name__)
            registry.plugins.append(PluginInfo(name, module, "unregistered", "object"))

    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(pm.get_name(exc.plugin) or "?", _unknown_hook_message(pm, exc)) from exc

    _collect(registry, "workload", pm.hook.ampsuite_workloads, Workload, registry.workloads)
    _collect(registry, "technique", pm.hook.ampsuite_techniques, Technique, registry.techniques)
    _collect(registry, "probe", pm.hook.ampsuite_probes, Probe, registry.probes)
    _collect(registry, "executor", pm.hook.ampsuite_executors, Executor, registry.executors)
    return registry


@functools.cache
def _distributions() -> Mapping[str, list[str]]:
    # Scanning every installed distribution costs ~0.3 s: once per process is enough.
    return importlib.metadata.packages_distributions()


def _module_version(module: str, plugin: object) -> str:
    """The version of the distribution that installs ``module``, else the module's ``__version__``."""
    dists = _distributions().get(module.split(".", 1)[0], [])
    if dists:
        try:
            return importlib.metadata.version(dists[0])
        except importlib.metadata.PackageNotFoundError:
            pass
    return str(getattr(plugin, "__version__", "unknown"))


def _unknown_hook_message(pm: pluggy.PluginManager, exc: pluggy.PluginValidationError) -> str:
    """pluggy's message, the closest real hook, and the real hooks (those with a spec) to choose from."""
    hooks = sorted(name for name, caller in vars(pm.hook).items() if _has_spec(caller))
    unknown = [
        name
        for name, caller in vars(pm.hook).items()
        if isinstance(caller, pluggy.HookCaller)
        and not caller.has_spec()
        and any(impl.plugin is exc.plugin for impl in caller.get_hookimpls())
    ]
    hint = ""
    if unknown:
        close = difflib.get_close_matches(unknown[0], hooks, n=1)
        if close:
            hint = f"; did you mean {close[0]!r}?"
    return f"{_one_line(str(exc))}{hint}; hooks are: {', '.join(hooks)}"


def _has_spec(caller: object) -> bool:
    return isinstance(caller, pluggy.HookCaller) and caller.has_spec()


def _collect(
    registry: Registry,
    kind: str,
    hook: pluggy.HookCaller,
    record_type: type[_R],
    into: dict[str, _R],
) -> None:
    # Each implementation is called on its own so that an error or a duplicate
    # can be pinned on the plugin that caused it. They are called in
    # registration order (built-ins, entry points, -p, objects), so that a
    # duplicate name is blamed on the later plugin: a third-party plugin that
    # reuses a built-in's name is told to rename itself, not to block the built-in.
    order = {p.name: i for i, p in enumerate(registry.plugins)}
    impls = sorted(hook.get_hookimpls(), key=lambda impl: order.get(impl.plugin_name, len(order)))
    for impl in impls:
        plugin = impl.plugin_name
        try:
            returned = impl.function()
        except (Exception, SystemExit) as exc:
            raise PluginError(plugin, f"hook {hook.name} raised {_raised(exc)}") from exc
        for record in _as_list(plugin, hook.name, returned, record_type):
            if not isinstance(record, record_type):
                raise PluginError(
                    plugin,
                    f"hook {hook.name} returned {type(record).__name__}, expected ampsuite.{record_type.__name__}",
                )
            record = check_record(plugin, kind, record)
            if record.name in into:
                other = registry.owner[(kind, record.name)]
                raise PluginError(
                    plugin,
                    f"{kind} {record.name!r} is already registered by plugin {other!r}; "
                    f"rename one, or block one with -p no:{plugin}",
                )
            into[record.name] = record
            registry.owner[(kind, record.name)] = plugin


def _as_list(plugin: str, hook_name: str, returned: object, record_type: type) -> list[Any]:
    """A registration hook's result as a list; a single record or a non-list is a clear contract error."""
    if returned is None:
        return []
    expected = f"hook {hook_name} must return a list of ampsuite.{record_type.__name__}"
    if isinstance(returned, Workload | Technique | Probe | Executor):
        raise PluginError(plugin, f"{expected}, got a single {type(returned).__name__}")
    if isinstance(returned, str | bytes | Mapping) or not isinstance(returned, Iterable):
        raise PluginError(plugin, f"{expected}, got {type(returned).__name__}")
    try:
        return list(returned)
    except (Exception, SystemExit) as exc:  # a generator hook fails while it is consumed
        raise PluginError(plugin, f"hook {hook_name} raised {_raised(exc)}") from exc
