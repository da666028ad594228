"""The held-out configurations: drawn by a rule written down before any evaluation on them.

    python examples/heldout/generate.py [FOLDER]   # writes drawn-1.toml .. drawn-8.toml and study.toml (here)

Each of the 8 drawn configurations has its own random stream (``[38, k]``,
k = 1..8: adding a ninth leaves the first eight as they are) and draws:

* its data: IID, Dirichlet with alpha log-uniform on [0.05, 1], or 1-3
  classes per device (``noniid``), each with chance 1/3;
* its fleet: 20-200 devices (log-uniform, rounded), a slow tail of a share
  uniform on [0, 0.2] (5-10x slower, ``fleet.slow_fraction``), drop-outs with
  a chance uniform on [0, 0.2] (``fleet.dropout``); shares to 2 decimals;
* its load: 2-4 jobs (uniform), the first ones of the digits jobs VGG-6 and
  CNN (examples/suite/two-jobs.toml), CNN at learning rate 0.02 and LeNet-5
  (examples/suite/four-jobs.toml).

What is not drawn follows rules fixed here, from the suite's configurations
(examples/suite/study.toml), where every such target was reached by some
single method in every seed:

* under 40 devices, one epoch and 25% of the devices a round (the suite's 20
  devices); from 40, two epochs and 15% (its 60 and 200);
* every job's target accuracy by the data: IID 0.8; Dirichlet alpha
  ``0.6 + 0.15 x log(alpha / 0.1) / log 5``, clipped to [0.5, 0.8] (the
  suite's 0.6 at 0.1 and 0.75 at 0.5, interpolated in log alpha); 1, 2, 3
  classes a device 0.35, 0.6, 0.7 (the suite's one class had 0.3, which
  noise crosses; two classes 0.6-0.65); 40 rounds at most (the suite's four
  jobs; its two had 25);
* the batched runtime (as the suite), and ``fleet.salt`` = 100 + k so that no
  two configurations share their device profiles on a seed.

The study (study.toml) is the whole evaluation: these 8, the suite's 8 (each
its own salt, 1..8: the suite itself gives its 60-device configurations the
same profiles seed by seed), the quickstart (salt 21) and noniid-hard (22),
both on the batched runtime; pilot seeds 0-2 (the single methods: they choose each
configuration's comparator and the single best solver) and test seeds 10-19
(they score).
"""

from __future__ import annotations

import math
import sys
import tomllib
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
STREAM = 38
COUNT = 8
METHODS = ["meta-greedy", "random", "fedcs", "genetic", "greedy", "bods", "rlds"]
BEST_OF = METHODS[1:]

# The pool of jobs, taken in this order: (name, model, image size, learning rate).
JOBS = [("vgg", "vgg6", 8, 0.05), ("cnn", "cnn-a-noniid", 8, 0.05), ("cnn-slow", "cnn-a-noniid", 8, 0.02),
        ("lenet", "lenet5", 12, 0.05)]
CLASS_TARGETS = {1: 0.35, 2: 0.6, 3: 0.7}


def draw(k: int) -> dict:
    """Configuration k's draws (its own stream) and the rules' consequences."""
    rng = np.random.default_rng([STREAM, k])
    kind = ["iid", "dirichlet", "classes"][int(rng.integers(3))]
    alpha = round(float(math.exp(rng.uniform(math.log(0.05), math.log(1.0)))), 3)
    classes = int(rng.integers(1, 4))
    size = round(math.exp(rng.uniform(math.log(20), math.log(200))))
    slow = round(float(rng.uniform(0, 0.2)), 2)
    dropout = round(float(rng.uniform(0, 0.2)), 2)
    jobs = int(rng.integers(2, 5))
    if kind == "iid":
        data, target = {"partition": "iid"}, 0.8
    elif kind == "dirichlet":
        data = {"partition": "dirichlet", "dirichlet_alpha": alpha}
        target = min(0.8, max(0.5, 0.6 + 0.15 * math.log(alpha / 0.1) / math.log(5)))
    else:
        data, target = {"partition": "noniid", "classes_per_device": classes}, CLASS_TARGETS[classes]
    return {"k": k, "data": data, "target": round(target, 2), "size": size, "slow": slow, "dropout": dropout,
            "jobs": jobs}


def name(d: dict) -> str:
    data = d["data"]
    what = {"iid": "iid", "dirichlet": f"dirichlet {data.get('dirichlet_alpha')}",
            "noniid": f"{data.get('classes_per_device')} class(es)"}[data["partition"]]
    return f"drawn {d['k']}: {what}, {d['size']} devices, {d['jobs']} jobs"


def config_text(d: dict) -> str:
    small = d["size"] < 40
    lines = [f"# Held-out configuration {d['k']} (examples/heldout/generate.py wrote it: do not edit).",
             f"# {name(d)}; slow tail {d['slow']}, drop-outs {d['dropout']}.",
             "seed = 0", f'out_dir = "runs/heldout-{d["k"]}"', "", "[fleet]", f"size = {d['size']}",
             'runtime = "batched"', f"slow_fraction = {d['slow']}", "slow_factor = [5.0, 10.0]",
             f"dropout = {d['dropout']}", f"salt = {100 + d['k']}"]
    for job, model, image, lr in JOBS[: d["jobs"]]:
        lines += ["", "[[jobs]]", f'name = "{job}"', f'model = "{model}"', f"image_size = {image}"]
        lines += [f"{key} = {value!r}".replace("'", '"') for key, value in d["data"].items()]
        lines += [f"epochs = {1 if small else 2}", "batch_size = 16", f"lr = {lr}",
                  f"fraction = {0.25 if small else 0.15}", f"target_accuracy = {d['target']}", "max_rounds = 40"]
    return "\n".join(lines) + "\n"


def inline(table: dict) -> str:
    def value(v: object) -> str:
        return repr(v).replace("'", '"') if not isinstance(v, str) else f'"{v}"'
    return "{ " + ", ".join(f'"{key}" = {value(v)}' for key, v in table.items()) + " }"


def study_text(drawn: list[dict]) -> str:
    suite = tomllib.loads((HERE.parent / "suite" / "study.toml").read_text())
    lines = ["# The held-out evaluation (examples/heldout/generate.py wrote it: do not edit):",
             "#   mjfl study examples/heldout/study.toml --out runs/heldout",
             f"methods = {METHODS!r}".replace("'", '"'), "pilot_seeds = [0, 1, 2]",
             f"test_seeds = {list(range(10, 20))!r}", "", "[ratio]", 'method = "meta-greedy"',
             f"best_of = {BEST_OF!r}".replace("'", '"')]
    for d in drawn:
        lines += ["", "[[variants]]", f'name = "{name(d)}"', f'config = "drawn-{d["k"]}.toml"']
    for salt, variant in enumerate(suite["variants"], start=1):
        config = "../suite/" + variant.get("config", suite["config"])
        lines += ["", "[[variants]]", f'name = "suite: {variant["name"]}"', f'config = "{config}"',
                  f"set = {inline({**variant.get('set', {}), 'fleet.salt': salt})}"]
    for salt, (label, config) in enumerate((("quickstart", "quickstart"), ("noniid-hard", "noniid-hard")), start=21):
        lines += ["", "[[variants]]", f'name = "{label}"', f'config = "../{config}.toml"',
                  f"set = {inline({'fleet.runtime': 'batched', 'fleet.salt': salt})}"]
    return "\n".join(lines) + "\n"


def main(folder: Path = HERE) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    drawn = [draw(k) for k in range(1, COUNT + 1)]
    for d in drawn:
        (folder / f"drawn-{d['k']}.toml").write_text(config_text(d))
    (folder / "study.toml").write_text(study_text(drawn))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
