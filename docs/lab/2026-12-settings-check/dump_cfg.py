import dataclasses
import json
import os
import sys

sys.path.insert(0, os.getcwd())
from actor.config import ActorConfig
from learner.config import LearnerConfig

out = {
    "learner": {k: repr(v) for k, v in dataclasses.asdict(LearnerConfig()).items()},
    "actor": {k: repr(v) for k, v in dataclasses.asdict(ActorConfig()).items()},
}
with open(sys.argv[1], "w") as f:
    json.dump(out, f, indent=1)
