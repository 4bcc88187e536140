import os
import subprocess
import sys
from pathlib import Path

import pytest

from keras_transformer.cli.demo import DEMO_SENTENCES

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_trains_exports_serves_and_answers_over_rest(tmp_path):
    # The README's first command, at a CI-sized budget: 80 steps reach sentences (val loss ~1.7;
    # at 30 the warming-up model may still answer with an empty string, which the demo rejects).
    result = subprocess.run(
        [
            sys.executable, "-m", "keras_transformer", "demo", "--workdir", str(tmp_path),
            "--epochs", "1", "--steps-per-epoch", "80",
        ],
        cwd=PROJECT_ROOT,
        env=dict(os.environ, PYTHONPATH=str(PROJECT_ROOT)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    output = result.stdout
    for step in ("[1/4]", "[2/4]", "[3/4]", "[4/4]"):
        assert step in output
    assert "HTTP 200" in output and '"predictions"' in output
    for sentence in DEMO_SENTENCES:
        assert f"{sentence}  ->  " in output
    assert (tmp_path / "models" / "demo_translator" / "1" / "saved_model.pb").is_file()
    assert (tmp_path / "runs" / "demo" / "model.keras").is_file()
