"""A device process's runtime imports (mjfl.jobs.runtime): the exporter stays unloaded, training is unchanged.

A fresh interpreter (an emulator worker's situation) imports the runtime
without the exporter, trains LeNet-5 from its program, and must end with the
same weights, to the bit, as this process's runtime, imported the ordinary
way; the exporter then still imports in that interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
from digits import digits
from repository import ROOT

from mjfl.jobs.base import LocalTraining
from mjfl.jobs.export import cached_programs
from mjfl.jobs.models import ModelSpec, initial_weights
from mjfl.jobs.trainers import ExecuTorchTrainer

SPEC = ModelSpec("lenet5", (1, 16, 16), 10)
TRAINING = LocalTraining(epochs=1, batch_size=16, lr=0.01, momentum=0.9)

DEVICE_PROCESS = """
import json, sys
import numpy as np
from mjfl.jobs.runtime import import_device_modules
import_device_modules()
from mjfl.jobs.base import LocalTraining
from mjfl.jobs.models import ModelSpec, initial_weights
from mjfl.jobs.trainers import ExecuTorchTrainer
program, data, out = sys.argv[1:]
spec = ModelSpec("lenet5", (1, 16, 16), 10)
with np.load(data) as shard:
    x, y = shard["x"], shard["y"]
trainer = ExecuTorchTrainer(open(program, "rb").read(), spec)
result = trainer.train(initial_weights(spec, 3), x, y, LocalTraining(epochs=1, batch_size=16, lr=0.01, momentum=0.9), seed=5)
np.savez(out, **result.weights)
loaded = sorted(name for name in sys.modules if name.split(".")[0] == "torchao" or name in ("executorch.exir", "executorch.exir.program"))
from executorch.exir import to_edge  # the exporter, imported after
print(json.dumps({"loaded": loaded, "to_edge": callable(to_edge)}))
"""


def test_a_device_process_trains_as_before_without_loading_the_exporter(tmp_path):
    found = cached_programs([SPEC], ROOT / ".mjfl-cache" / "programs", max_batch=64, workers=1)
    program = found[SPEC][0]
    x, y = digits(16)
    np.savez(tmp_path / "shard.npz", x=x[:96], y=y[:96])
    done = subprocess.run(
        [sys.executable, "-c", DEVICE_PROCESS, str(program), str(tmp_path / "shard.npz"), str(tmp_path / "w.npz")],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said == {"loaded": [], "to_edge": True}
    here = ExecuTorchTrainer(program.read_bytes(), SPEC).train(initial_weights(SPEC, 3), x[:96], y[:96], TRAINING, seed=5)
    with np.load(tmp_path / "w.npz") as there:
        assert sorted(there.files) == sorted(here.weights)
        for name, weights in here.weights.items():
            np.testing.assert_array_equal(there[name], weights)
