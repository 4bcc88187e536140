"""Version polling, availability-preserving swaps, failed loads, labels and status."""

import dataclasses
import gc
import weakref
from pathlib import Path

import pytest
from tensorflow_serving.apis import get_model_status_pb2
from tensorflow_serving.config import model_server_config_pb2

from serving import model_manager
from serving.errors import ServingError
from serving.model_manager import ModelManager, aspired_versions

State = get_model_status_pb2.ModelVersionStatus.State


@dataclasses.dataclass
class FakeServable:
    name: str
    version: int


class FakeLoader:
    """Loads a version unless its directory holds a file named BROKEN."""

    def __init__(self):
        self.calls: list[int] = []

    def __call__(self, name, version, path):
        self.calls.append(version)
        if (Path(path) / "BROKEN").exists():
            raise OSError(f"corrupt SavedModel in {path}")
        return FakeServable(name, version)


def config_for(base: Path, name: str = "m", **fields) -> model_server_config_pb2.ModelServerConfig:
    config = model_server_config_pb2.ModelServerConfig()
    config.model_config_list.config.add(name=name, base_path=str(base), **fields)
    return config


def states(manager, name="m"):
    return [
        (s.version, State.Name(s.state), s.status.error_code)
        for s in manager.status(name).model_version_status
    ]


def test_serves_highest_numeric_version_and_swaps_after_loading(tmp_path):
    for name in ("1", "3", "tmp-export", "0007x"):
        (tmp_path / name).mkdir()
    (tmp_path / "9").write_text("a file, not a version")
    loader = FakeLoader()
    manager = ModelManager(config_for(tmp_path), loader, poll_seconds=0)
    manager.start()
    assert manager.servable("m") == FakeServable("m", 3) and loader.calls == [3]
    (tmp_path / "00004").mkdir()  # parsed as version 4
    manager.poll()
    assert manager.servable("m").version == 4
    assert states(manager) == [(4, "AVAILABLE", 0), (3, "END", 0)]
    with pytest.raises(ServingError) as gone:
        manager.servable("m", version=3)
    assert gone.value.code == "NOT_FOUND"
    assert gone.value.message == "Servable not found for request: Specific(m, 3)"
    manager.stop()


def test_failed_version_leaves_old_one_serving_and_is_not_retried(tmp_path):
    (tmp_path / "1").mkdir()
    loader = FakeLoader()
    manager = ModelManager(config_for(tmp_path), loader, poll_seconds=0)
    manager.start()
    (tmp_path / "2").mkdir()
    (tmp_path / "2" / "BROKEN").write_text("")
    manager.poll()
    manager.poll()
    assert loader.calls == [1, 2]  # the broken version is tried once
    assert manager.servable("m").version == 1
    status = manager.status("m").model_version_status
    assert [(s.version, State.Name(s.state)) for s in status] == [(2, "END"), (1, "AVAILABLE")]
    assert status[0].status.error_code != 0
    assert "corrupt SavedModel" in status[0].status.error_message
    # A fresh copy renamed into place after the broken one disappeared is loaded.
    (tmp_path / "2" / "BROKEN").unlink()
    (tmp_path / "2").rename(tmp_path / "aside")
    manager.poll()
    (tmp_path / "aside").rename(tmp_path / "2")
    manager.poll()
    assert manager.servable("m").version == 2


def test_load_retries(tmp_path):
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "BROKEN").write_text("")
    loader = FakeLoader()
    manager = ModelManager(config_for(tmp_path), loader, poll_seconds=0, max_load_retries=2,
                           retry_interval=0.01)
    with pytest.raises(RuntimeError, match=r"1 model\(s\) did not become available"):
        manager.start()
    assert loader.calls == [1, 1, 1]


def test_removing_the_newest_version_brings_back_the_previous(tmp_path):
    (tmp_path / "1").mkdir()
    (tmp_path / "2").mkdir()
    manager = ModelManager(config_for(tmp_path), FakeLoader(), poll_seconds=0)
    manager.start()
    (tmp_path / "2").rmdir()
    manager.poll()
    assert manager.servable("m").version == 1
    assert states(manager)[0] == (2, "END", 0)


def test_version_policies():
    policy = model_server_config_pb2.ModelConfig().model_version_policy
    assert aspired_versions(policy, [1, 5, 3]) == {5}
    policy.latest.num_versions = 2
    assert aspired_versions(policy, [1, 5, 3]) == {3, 5}
    policy.all.SetInParent()
    assert aspired_versions(policy, [1, 5, 3]) == {1, 3, 5}
    policy.specific.versions.extend([3, 4])
    assert aspired_versions(policy, [1, 5, 3]) == {3}


def test_labels_and_request_errors(tmp_path):
    for name in ("1", "2"):
        (tmp_path / name).mkdir()
    config = config_for(tmp_path)
    model = config.model_config_list.config[0]
    model.model_version_policy.all.SetInParent()
    model.version_labels["stable"] = 1
    model.version_labels["canary"] = 2
    manager = ModelManager(config, FakeLoader(), poll_seconds=0)
    manager.start()
    assert manager.servable("m").version == 2
    assert manager.servable("m", label="stable").version == 1
    assert manager.servable("m", version=1).version == 1

    def error(**kwargs):
        with pytest.raises(ServingError) as caught:
            manager.servable(**kwargs)
        return caught.value.code, caught.value.message

    assert error(name="m", label="beta") == (
        "INVALID_ARGUMENT", "Unrecognized servable version label: beta"
    )
    assert error(name="x") == ("NOT_FOUND", "Servable not found for request: Latest(x)")
    with pytest.raises(ServingError, match="Could not find any versions of model x"):
        manager.status("x")
    with pytest.raises(ServingError, match="Could not find version 7 of model m"):
        manager.status("m", 7)
    assert [s.version for s in manager.status("m", 1).model_version_status] == [1]


def test_label_on_unavailable_version_fails_startup(tmp_path):
    (tmp_path / "1").mkdir()
    config = config_for(tmp_path)
    config.model_config_list.config[0].version_labels["stable"] = 5
    with pytest.raises(ServingError, match="not currently available"):
        ModelManager(config, FakeLoader(), poll_seconds=0).start()


def test_reload_config_adds_and_removes_models(tmp_path):
    for model in ("a", "b"):
        (tmp_path / model / "1").mkdir(parents=True)
    manager = ModelManager(config_for(tmp_path / "a", "a"), FakeLoader(), poll_seconds=0)
    manager.start()
    manager.reload_config(config_for(tmp_path / "b", "b"))
    assert manager.model_names() == ["b"] and manager.servable("b").version == 1
    with pytest.raises(ServingError):
        manager.servable("a")


class CyclicLoader(FakeLoader):
    """Servables that hold themselves in a reference cycle, as a loaded SavedModel does: only
    a garbage collection frees them."""

    def __call__(self, name, version, path):
        servable = super().__call__(name, version, path)
        servable.itself = servable
        return servable


def test_an_unloaded_version_is_freed_and_its_memory_handed_back(tmp_path, monkeypatch):
    trims = []
    monkeypatch.setattr(model_manager, "return_freed_memory", lambda: trims.append(1))
    gc.disable()  # the collections must come from the manager (under load Python's may not)
    try:
        (tmp_path / "1").mkdir()
        manager = ModelManager(config_for(tmp_path), CyclicLoader(), poll_seconds=0)
        manager.start()
        in_flight = manager.servable("m")  # a request still holds version 1
        released = weakref.ref(in_flight)
        (tmp_path / "2").mkdir()
        manager.poll()
        assert manager.servable("m").version == 2 and released() is in_flight and trims == []
        del in_flight  # the request finishes; only its reference cycle keeps version 1
        assert released() is not None
        manager.poll()  # the next poll collects it and hands its memory back, once
        assert released() is None and trims == [1]
        manager.poll()
        assert trims == [1]
        (tmp_path / "3").mkdir()  # no request holds version 2: handed back as it is unloaded
        manager.poll()
        assert manager.servable("m").version == 3 and trims == [1, 1]
        manager.stop()
    finally:
        gc.enable()


def test_a_leaked_version_is_reported_and_no_longer_collected(tmp_path, monkeypatch, caplog):
    collections = []
    monkeypatch.setattr(model_manager.gc, "collect", lambda: collections.append(1))
    (tmp_path / "1").mkdir()
    manager = ModelManager(config_for(tmp_path), FakeLoader(), poll_seconds=0)
    manager.start()
    leaked = manager.servable("m")  # held for ever
    (tmp_path / "2").mkdir()
    for _ in range(15):
        manager.poll()
    assert len(collections) == 10 and leaked.version == 1
    assert "version: 1} is still referenced" in caplog.text
    manager.stop()

