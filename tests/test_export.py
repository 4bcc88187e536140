"""Export: a SavedModel that runs with TensorFlow and tensorflow-text alone, TF Serving's layout,
version numbering, atomic writes, and a warmup file of real predict requests."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2
from tensorflow_serving.apis import prediction_log_pb2

from keras_transformer import export
from keras_transformer.cli import main
from keras_transformer.inference import Translator
from keras_transformer.run_dir import load_run

# Runs in a fresh interpreter: -I keeps the repository and PYTHONPATH off sys.path, and the finder
# refuses project code even if the package is installed, so only TensorFlow and tensorflow-text
# (and what `import tensorflow` itself imports) can be used.
STANDALONE = textwrap.dedent('''
    import importlib.abc, json, sys

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("keras_transformer", "serving"):
                raise ImportError(f"{name} is not available here")

    sys.meta_path.insert(0, Refuse())
    try:
        import keras_transformer
        sys.exit("keras_transformer is importable")
    except ImportError:
        pass

    import tensorflow as tf
    import tensorflow_text  # registers the tokenizer ops
    from tensorflow_serving.apis import prediction_log_pb2

    export_dir, sentences, source_tokens = sys.argv[1], *map(json.loads, sys.argv[2:])
    model = tf.saved_model.load(export_dir)
    text = model.signatures["serving_default"](text=tf.constant(sentences))
    source_tokens = tf.constant(source_tokens, tf.int64)
    tokens = model.signatures["translate_tokens"](source_tokens=source_tokens)
    attention = model.signatures["attention"](text=tf.constant(sentences[:1]))
    warmup = 0
    for record in tf.data.TFRecordDataset(export_dir + "/assets.extra/tf_serving_warmup_requests"):
        request = prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
        inputs = {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()}
        outputs = model.signatures[request.model_spec.signature_name](**inputs)
        warmup += len(outputs["translation"].numpy())
    print(json.dumps({
        "translation": [t.decode() for t in text["translation"].numpy()],
        "score": text["score"].numpy().tolist(),
        "tokens": text["tokens"].numpy().tolist(),
        "tokens_translation": [t.decode() for t in tokens["translation"].numpy()],
        "attention_shape": list(attention["attention"].shape),
        "warmup_sentences": warmup,
        "project_modules": [
            m for m in sys.modules if m.split(".")[0] in ("keras_transformer", "serving")
        ],
    }))
''')


@pytest.fixture(scope="module")
def run(trained_run_dir):
    return load_run(trained_run_dir, compile=False)


@pytest.fixture(scope="module")
def sentences(run):
    with open(run.settings.source_file, encoding="utf-8") as lines:
        return [next(lines).strip() for _ in range(4)] + ["We need ninety five chairs."]


@pytest.fixture(scope="module")
def exported(trained_run_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("models") / "translator"
    assert main(["export", str(trained_run_dir), "--base", str(base), "--beam", "2"]) == 0
    return base


@pytest.mark.slow
def test_export_runs_without_project_code_and_matches_the_model(
    exported, run, sentences, tmp_path
):
    assert sorted(os.listdir(exported)) == ["1"]
    version = exported / "1"
    assert (version / "saved_model.pb").is_file() and (version / "variables").is_dir()
    in_memory = Translator(run.model, run.source_tokenizer, run.target_tokenizer, beam_width=2)
    expected = in_memory.translate(tf.constant(sentences))
    source_tokens = run.source_tokenizer.tokenize(tf.constant(sentences)).to_tensor()

    script = tmp_path / "standalone.py"
    script.write_text(STANDALONE)
    result = subprocess.run(
        [sys.executable, "-I", str(script), str(version), json.dumps(sentences),
         json.dumps(source_tokens.numpy().tolist())],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = json.loads(result.stdout.strip().splitlines()[-1])

    translations = [t.decode() for t in expected["translation"].numpy()]
    assert outputs["translation"] == translations
    assert outputs["tokens_translation"] == translations
    assert outputs["tokens"] == expected["tokens"].numpy().tolist()
    np.testing.assert_allclose(outputs["score"], expected["score"].numpy(), rtol=1e-5)
    # The demo model learned its training sentences: the export reproduces the references.
    with open(run.settings.target_file, encoding="utf-8") as lines:
        references = [next(lines).strip() for _ in range(4)]
    assert translations[:4] == references
    assert outputs["attention_shape"][:3] == [1, 1, 2]  # batch, decoder layers, heads
    assert outputs["warmup_sentences"] > 0
    assert outputs["project_modules"] == []


def warmup_requests(version_dir):
    """The predict requests of an export's warmup file."""
    path = version_dir / "assets.extra" / "tf_serving_warmup_requests"
    records = [
        prediction_log_pb2.PredictionLog.FromString(record.numpy())
        for record in tf.data.TFRecordDataset(str(path))
    ]
    assert 1 <= len(records) <= 1000  # TF Serving refuses more
    return [record.predict_log.request for record in records]


def test_warmup_file_holds_predict_requests_for_the_signatures(exported):
    requests = warmup_requests(exported / "1")
    assert {request.model_spec.name for request in requests} == {"translator"}
    assert {request.model_spec.signature_name for request in requests} == {
        "serving_default", "translate_tokens"
    }
    # (The standalone test above feeds every request to its signature.)
    for request in requests:
        inputs = {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()}
        assert list(inputs) == (
            ["text"] if request.model_spec.signature_name == "serving_default"
            else ["source_tokens"]
        )
        assert len(next(iter(inputs.values()))) >= 1


def test_existing_version_is_refused(exported, trained_run_dir, capsys):
    status = main(["export", str(trained_run_dir), "--base", str(exported), "--version", "1"])
    assert status == 1
    assert "already exists" in capsys.readouterr().err
    assert sorted(os.listdir(exported)) == ["1"]


@pytest.fixture
def fake_save(monkeypatch):
    """Replaces the (slow) SavedModel writer; records what the base directory showed meanwhile."""
    seen = []

    def save(module, path, signatures=None):
        seen.append(sorted(os.listdir(os.path.dirname(path))))
        # A SavedModel with one serving graph and no signatures (the model card reads it).
        graph = meta_graph_pb2.MetaGraphDef(meta_info_def={"tags": ["serve"]})
        with open(os.path.join(path, "saved_model.pb"), "wb") as file:
            file.write(saved_model_pb2.SavedModel(meta_graphs=[graph]).SerializeToString())
        if module.fail:
            raise OSError("disk full")

    monkeypatch.setattr(tf.saved_model, "save", save)
    return seen


class FakeTranslator:
    """What `export_translator` uses of a `Translator`, without the cost of tracing one."""

    def __init__(self, source_tokenizer, fail=False):
        self.source_tokenizer = source_tokenizer
        self.fail = fail
        self.beam_width, self.alpha, self.max_length = 3, 0.5, None
        self.xla_max_batch, self.shapes = 0, []

    def signatures(self):
        return {}

    def xla_shapes(self):
        return self.shapes


@pytest.fixture
def translator(run):
    return FakeTranslator(run.source_tokenizer)


def test_versions_count_up_from_the_highest(translator, fake_save, tmp_path):
    base = tmp_path / "translator"
    (base / "tmp-export").mkdir(parents=True)  # non-numeric names are not versions
    (base / "9").write_text("a file, not a version")
    exported = [export.export_translator(translator, base, warmup_sentences=["one"])
                for _ in range(2)]
    exported.append(export.export_translator(translator, base, version=7))
    exported.append(export.export_translator(translator, base))
    assert [path.name for path in exported] == ["1", "2", "7", "8"]
    assert export.versions(base) == [1, 2, 7, 8]
    card = json.loads((exported[-1] / "assets.extra" / "model_card.json").read_text())
    assert card["decoding"] == {"beam_width": 3, "alpha": 0.5, "max_length": None,
                                "xla_max_batch": 0}
    assert card["signatures"] == {}
    with pytest.raises(FileExistsError):
        export.export_translator(translator, base, version=2)
    # While a version was being written, only a hidden staging directory was there.
    assert all(
        name.startswith(".") or name in ("tmp-export", "9") or name.isdigit()
        for listing in fake_save for name in listing
    )
    assert [name for name in fake_save[0] if name.startswith(".")][0].startswith(".1.")
    assert "1" not in fake_save[0] and "8" not in fake_save[-1]


def test_failed_export_leaves_nothing_behind(translator, fake_save, tmp_path):
    base = tmp_path / "translator"
    translator.fail = True
    with pytest.raises(OSError, match="disk full"):
        export.export_translator(translator, base)
    assert os.listdir(base) == []


def test_warmup_compiles_every_shape_decoded_under_xla(translator):
    translator.shapes = [(1, 16), (1, 24), (2, 16)]
    requests = [log.predict_log.request
                for log in export.warmup_requests(translator, ["one two", "three"], "m")]
    xla = [tf.make_ndarray(request.inputs["source_tokens"]) for request in requests[3:]]
    assert [tokens.shape for tokens in xla] == translator.shapes
    assert {request.model_spec.signature_name for request in requests[3:]} == {
        "translate_tokens"}
    sentence = tf.make_ndarray(requests[2].inputs["source_tokens"])[0]  # "one two", tokenized
    for tokens in xla:  # the sentence repeated to the length, in every row
        np.testing.assert_array_equal(tokens[:, : len(sentence)],
                                      np.broadcast_to(sentence, (len(tokens), len(sentence))))


def test_cli_exports_with_xla_for_small_batches(trained_run_dir, monkeypatch, tmp_path):
    def save(module, path, signatures=None):  # no tracing: only what the card reads
        graph = meta_graph_pb2.MetaGraphDef(meta_info_def={"tags": ["serve"]})
        with open(os.path.join(path, "saved_model.pb"), "wb") as file:
            file.write(saved_model_pb2.SavedModel(meta_graphs=[graph]).SerializeToString())
        saved.append(module)

    saved = []
    monkeypatch.setattr(tf.saved_model, "save", save)
    base = tmp_path / "translator"
    assert main(["export", str(trained_run_dir), "--base", str(base), "--xla-max-batch", "2"]) == 0
    (translator,) = saved
    assert translator.xla_max_batch == 2
    card = json.loads((base / "1" / "assets.extra" / "model_card.json").read_text())
    assert card["decoding"]["xla_max_batch"] == 2
    shapes = [tf.make_ndarray(request.inputs["source_tokens"]).shape
              for request in warmup_requests(base / "1")
              if request.model_spec.signature_name == "translate_tokens"]
    assert shapes[1:] == translator.xla_shapes()  # after the plain pre-tokenized request
