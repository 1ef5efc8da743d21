"""The environment that trial workers must see as the driver does: the data folders, named where each is read (on
a cluster each must exist at that path on every node, docs/clusters.md), the node-local folders the trials of a
node share, and the models' hub settings. The engine passes them to Ray's workers."""

from __future__ import annotations

from sweep.run.trial import STORAGE_OUTAGE_ENV
from trainers.data.sources import STS_DIR_ENV
from trainers.data.wordnet import WORDNET_DIR_ENV
from trainers.models.frozen_outputs import ENVIRONMENT_FOLDER as FROZEN_OUTPUTS_ENV
from trainers.suites import SUITES
from trainers.training.shared_stages import ENVIRONMENT_FOLDER as SHARED_STAGES_ENV

FORWARDED_ENV = tuple(dict.fromkeys((
    STS_DIR_ENV, WORDNET_DIR_ENV, FROZEN_OUTPUTS_ENV, SHARED_STAGES_ENV,
    *(suite.env for suite in SUITES.values() if suite.env),
    "HF_HUB_OFFLINE", "HF_HOME", "HF_ENDPOINT", "TOKENIZERS_PARALLELISM", STORAGE_OUTAGE_ENV,
)))
