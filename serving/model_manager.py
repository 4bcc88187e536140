"""Which versions of which models are loaded: TF Serving's file-system source + manager.

Every `poll_seconds` each model's base path is scanned for numeric version directories; the
versions its version policy aspires to are loaded, and only once an aspired version is AVAILABLE
are the others unloaded (so there is never a moment without a servable). A version that fails to
load stays in the status list (state END, non-OK error) and is not retried until its directory
disappears; the previous version keeps serving meanwhile. Requests hold a reference to the
servable they resolved, so unloading never cuts an in-flight request short.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import re
import threading
import weakref
from collections.abc import Callable
from typing import Any

from tensorflow.core.protobuf import error_codes_pb2
from tensorflow_serving.apis import get_model_status_pb2
from tensorflow_serving.config import model_server_config_pb2

from serving.errors import ServingError, from_exception, not_found
from serving.heap import large_blocks_mapped, resident_mib, return_freed_memory

log = logging.getLogger(__name__)

Loader = Callable[[str, int, str], Any]
_VERSION_DIR = re.compile(r"\d{1,18}")
# Polls that collect garbage for an unloaded servable before it is reported as leaked.
_COLLECTIONS_BEFORE_GIVING_UP = 10


@dataclasses.dataclass
class _Version:
    state: str = "START"
    error_code: str = "OK"
    error_message: str = ""
    servable: Any = None
    retry: bool = True


@dataclasses.dataclass
class _Unloaded:
    """A servable unloaded but perhaps still in memory (a request or a reference cycle holds it).

    `reference` is None for a servable that cannot be weakly referenced (taken as freed)."""

    name: str
    version: int
    reference: weakref.ref | None
    collections_left: int = _COLLECTIONS_BEFORE_GIVING_UP


@dataclasses.dataclass
class _Model:
    config: model_server_config_pb2.ModelConfig
    versions: dict[int, _Version] = dataclasses.field(default_factory=dict)
    labels: dict[str, int] = dataclasses.field(default_factory=dict)

    def available(self) -> list[int]:
        return sorted(v for v, s in self.versions.items() if s.state == "AVAILABLE")


def list_versions(base_path: str) -> dict[int, str]:
    """Numeric subdirectories of `base_path` (version -> path); other names are ignored."""
    versions: dict[int, str] = {}
    for name in sorted(os.listdir(base_path)):
        path = os.path.join(base_path, name)
        if _VERSION_DIR.fullmatch(name) and os.path.isdir(path):
            if int(name) in versions:
                log.warning("Two directories map to version %d; using %s", int(name), path)
            versions[int(name)] = path
    return versions


def aspired_versions(
    policy: model_server_config_pb2.FileSystemStoragePathSourceConfig.ServableVersionPolicy,
    present: list[int],
) -> set[int]:
    """The versions a `model_version_policy` wants served among those present on disk."""
    kind = policy.WhichOneof("policy_choice")
    if kind == "all":
        return set(present)
    if kind == "specific":
        return set(policy.specific.versions) & set(present)
    count = policy.latest.num_versions if kind == "latest" and policy.latest.num_versions else 1
    return set(sorted(present)[-count:])


class ModelManager:
    """Loads, swaps and reports the versions of the configured models.

    Args:
        config: the models (a `ModelServerConfig` with a `model_config_list`).
        loader: `loader(name, version, path)` returns a loaded servable or raises.
        poll_seconds: how often to rescan base paths once started (<= 0: never).
        max_load_retries: extra attempts for a failing load, `retry_interval` seconds apart.
        retry_interval: seconds between load attempts.
    """

    def __init__(
        self,
        config: model_server_config_pb2.ModelServerConfig,
        loader: Loader,
        poll_seconds: float = 1.0,
        max_load_retries: int = 0,
        retry_interval: float = 60.0,
    ):
        self._loader = loader
        self._poll_seconds = poll_seconds
        self._max_load_retries = max_load_retries
        self._retry_interval = retry_interval
        self._models = {m.name: _Model(m) for m in config.model_config_list.config}
        self._config = config
        self._lock = threading.Lock()  # guards _models and every _Version
        self._poll_lock = threading.Lock()  # one scan at a time (poll thread vs config reload)
        self._stopping = threading.Event()
        self._unloaded: list[_Unloaded] = []  # waiting to be freed; under _poll_lock
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Loads every model before returning (as TF Serving does before opening its ports),
        applies the version labels, then keeps polling in a background thread.

        Raises:
            RuntimeError: a model's versions all failed to load, or a label names a version that
                is not available.
        """
        self._wait_until_available(list(self._models))
        self._apply_labels(self._config)
        if self._poll_seconds > 0:
            self._thread = threading.Thread(target=self._poll_forever, name="version-poll",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()

    def reload_config(self, config: model_server_config_pb2.ModelServerConfig) -> None:
        """Serves exactly the models of `config` from now on (TF Serving's config reload):
        new models are loaded before this returns, removed ones are unloaded.

        Raises:
            ServingError: FAILED_PRECONDITION when a new model cannot be loaded or a label points
                at a version that is not available.
        """
        with self._poll_lock:
            with self._lock:
                old = self._models
                self._models = {}
                for model_config in config.model_config_list.config:
                    model = old.pop(model_config.name, None) or _Model(model_config)
                    model.config = model_config
                    self._models[model_config.name] = model
            for model in old.values():
                for version in list(model.versions):
                    self._unload(model, version)
        try:
            self._wait_until_available(list(self._models))
        except RuntimeError as error:
            raise ServingError("FAILED_PRECONDITION", str(error)) from None
        self._apply_labels(config)
        self._config = config

    # -- requests ----------------------------------------------------------------------------

    def servable(self, name: str, version: int | None = None, label: str | None = None) -> Any:
        """The servable a request names: a label, a version, or (default) the newest available.

        Raises:
            ServingError: NOT_FOUND for an unknown model or version, INVALID_ARGUMENT for an
                unknown label.
        """
        with self._lock:
            model = self._models.get(name)
            if label is not None:
                if model is None or label not in model.labels:
                    raise ServingError(
                        "INVALID_ARGUMENT", f"Unrecognized servable version label: {label}"
                    )
                version = model.labels[label]
            if version is None:
                available = model.available() if model else []
                if not available:
                    raise not_found(f"Servable not found for request: Latest({name})")
                return model.versions[available[-1]].servable
            entry = model.versions.get(version) if model else None
            if entry is None or entry.state != "AVAILABLE":
                raise not_found(f"Servable not found for request: Specific({name}, {version})")
            return entry.servable

    def status(
        self, name: str, version: int | None = None
    ) -> get_model_status_pb2.GetModelStatusResponse:
        """Every tracked version of a model, newest first, or just `version`.

        Raises:
            ServingError: NOT_FOUND for an unknown model or untracked version.
        """
        with self._lock:
            model = self._models.get(name)
            if model is None or not model.versions:
                raise not_found(f"Could not find any versions of model {name}")
            if version is not None and version not in model.versions:
                raise not_found(f"Could not find version {version} of model {name}")
            chosen = [version] if version is not None else sorted(model.versions, reverse=True)
            response = get_model_status_pb2.GetModelStatusResponse()
            for number in chosen:
                entry = model.versions[number]
                status = response.model_version_status.add(
                    version=number,
                    state=get_model_status_pb2.ModelVersionStatus.State.Value(entry.state),
                )
                status.status.SetInParent()
                status.status.error_code = _error_code_value(entry.error_code)
                status.status.error_message = entry.error_message
            return response

    def model_names(self) -> list[str]:
        with self._lock:
            return list(self._models)

    # -- polling -----------------------------------------------------------------------------

    def _wait_until_available(self, names: list[str]) -> None:
        warned: set[str] = set()
        while True:
            self.poll()
            with self._lock:
                models = [self._models[n] for n in names if n in self._models]
                pending = [m.config.name for m in models if not m.available()]
                failed = [
                    n for n in pending
                    if self._models[n].versions
                    and all(not v.retry for v in self._models[n].versions.values())
                ]
            if failed:
                raise RuntimeError(f"{len(failed)} model(s) did not become available: {failed}")
            if not pending:
                return
            for name in set(pending) - warned:
                log.warning("Waiting for a loadable version of model %s", name)
                warned.add(name)
            if self._stopping.wait(max(self._poll_seconds, 0.2)):
                raise RuntimeError("Stopped while waiting for models to load")

    def _poll_forever(self) -> None:
        while not self._stopping.wait(self._poll_seconds):
            try:
                self.poll()
            except Exception:  # a poll must never kill the poll thread
                log.exception("Version poll failed")

    def poll(self) -> None:
        """Scans every base path once, loading and unloading versions as needed."""
        with self._poll_lock:
            with self._lock:
                models = list(self._models.values())
            for model in models:
                self._poll_model(model)
            self._release_freed_memory()

    def _poll_model(self, model: _Model) -> None:
        config = model.config
        try:
            present = list_versions(config.base_path)
        except OSError as error:
            log.error("Cannot list base path of model %s: %s", config.name, error)
            return
        if not present:
            log.debug("No versions of servable %s found under %s", config.name, config.base_path)
        with self._lock:
            for number, entry in model.versions.items():
                if number not in present and not entry.retry:
                    entry.retry = True  # gone from disk: a fresh copy may be loaded again
        aspired = aspired_versions(config.model_version_policy, list(present))
        for number in sorted(aspired, reverse=True):
            with self._lock:
                entry = model.versions.get(number)
                if entry is not None and (entry.state == "AVAILABLE" or not entry.retry):
                    continue
                entry = model.versions[number] = _Version(state="LOADING")
            self._load(model, number, present[number], entry)
        with self._lock:
            keep_old = not any(
                model.versions[n].state == "AVAILABLE" for n in aspired if n in model.versions
            )
            stale = [n for n in model.available() if n not in aspired]
        if not keep_old:
            for number in stale:
                self._unload(model, number)

    def _load(self, model: _Model, number: int, path: str, entry: _Version) -> None:
        name = model.config.name
        for attempt in range(self._max_load_retries + 1):
            log.info("Loading servable %s version %d from %s", name, number, path)
            try:
                with large_blocks_mapped():
                    servable = self._loader(name, number, path)
            except Exception as exception:  # any load failure is reported, never raised
                error = from_exception(exception)
                log.error("Loading %s version %d failed: %s", name, number, error.message)
                if attempt < self._max_load_retries and not self._stopping.wait(
                    self._retry_interval
                ):
                    continue
                with self._lock:
                    entry.state, entry.retry = "END", False
                    entry.error_code, entry.error_message = error.code, error.message
                return
            with self._lock:
                entry.state, entry.servable = "AVAILABLE", servable
            log.info("Successfully loaded servable version {name: %s version: %d}", name, number)
            return

    def _unload(self, model: _Model, number: int) -> None:
        with self._lock:
            entry = model.versions[number]
            if entry.state != "AVAILABLE":
                return
            servable, entry.state, entry.servable = entry.servable, "END", None
        log.info("Unloaded servable version {name: %s version: %d}", model.config.name, number)
        try:
            reference = weakref.ref(servable)
        except TypeError:  # not weakly referenceable
            reference = None
        del servable
        self._unloaded.append(_Unloaded(model.config.name, number, reference))
        self._release_freed_memory()

    def _release_freed_memory(self) -> None:
        """Frees what unloaded servables leave behind and hands the heap back to the OS.

        A loaded SavedModel is full of reference cycles, which Python's collector reaches only
        at its next full collection: under load that can be never (measured: a swapped-out
        Multi30k export stayed resident, +400 MiB). So while an unloaded servable is still in
        memory, each poll collects garbage, at most `_COLLECTIONS_BEFORE_GIVING_UP` times (a
        request in flight holds it for a moment; a real leak is logged, not collected for ever).
        """
        if not self._unloaded:
            return
        gc.collect()
        waiting = [u for u in self._unloaded if u.reference is not None and u.reference()]
        if len(waiting) < len(self._unloaded):
            return_freed_memory()
            log.info("Freed an unloaded servable: resident memory %d MiB", resident_mib())
        for unloaded in waiting:
            unloaded.collections_left -= 1
            if unloaded.collections_left == 0:
                log.warning("Unloaded servable version {name: %s version: %d} is still "
                            "referenced; its memory is not freed", unloaded.name,
                            unloaded.version)
        self._unloaded = [u for u in waiting if u.collections_left > 0]


    def _apply_labels(self, config: model_server_config_pb2.ModelServerConfig) -> None:
        with self._lock:
            for model_config in config.model_config_list.config:
                versions = self._models[model_config.name].versions
                for number in model_config.version_labels.values():
                    if number not in versions or versions[number].state != "AVAILABLE":
                        raise ServingError(
                            "FAILED_PRECONDITION",
                            f"Request to assign label to version {number} of model "
                            f"{model_config.name}, which is not currently available for inference",
                        )
            for model_config in config.model_config_list.config:
                self._models[model_config.name].labels = dict(model_config.version_labels)


def _error_code_value(name: str) -> int:
    return error_codes_pb2.Code.Value(name)
