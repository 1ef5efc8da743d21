"""A trial run's data tags read back typed (:func:`results.reader.trial_tags`): JSON and "true" decoded, and a
run recorded before a tag existed reading as its readers read it before (None, "", 0, False, empty)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from results.reader import TrialTags, trial_tags
from results.record import ModelState, Tag


def run_with(tags: dict[str, str]) -> SimpleNamespace:
    return SimpleNamespace(data=SimpleNamespace(tags=tags))


def test_every_data_tag_is_read_with_its_type():
    parts = {"knobs": "k1", "models": "m1", "code": "c1"}
    evaluated = [{"suite": "senteval", "kfold": 5}]
    keys = {"ab12": ["test_senteval_avg_acc"]}
    tags = trial_tags(run_with({
        Tag.NAME: "sct-main", Tag.SPEC_FILE: "search_spaces/sct_main.yaml", Tag.SPEC_HASH: "0a1b2c",
        Tag.BUDGET: "smoke", Tag.GIT_COMMIT: "abcdef0", Tag.TRIAL_ID: "t_00003", Tag.PARENT_RUN_ID: "parent-1",
        Tag.TRIAL_KEY: "key-1", Tag.TRIAL_KEY_PARTS: json.dumps(parts, sort_keys=True),
        Tag.TRIAL_KEY_WITHOUT_CODE: "key-1-nc", Tag.REUSED_FROM: "run-0", Tag.REUSED_SWEEP: "sct-old",
        Tag.REUSED_OTHER_CODE: "true", Tag.ERROR: "boom", Tag.FAILURES: "2", Tag.STOPPED_BY_SCHEDULER: "true",
        Tag.CHECKPOINT: "s3://bucket/sweep/checkpoint_000004", Tag.CHECKPOINT_STEP: "120",
        Tag.MODEL: ModelState.KEPT, Tag.MODEL_URI: "models:/m-1", Tag.EVALUATED_LATER: json.dumps(evaluated),
        Tag.EVALUATION_KEYS: json.dumps(keys), Tag.TRAIN_PRECISION: "bf16", Tag.EVAL_PRECISION: "fp32",
    }))
    assert tags == TrialTags(
        sweep_name="sct-main", spec_file="search_spaces/sct_main.yaml", spec_hash="0a1b2c", budget="smoke",
        git_commit="abcdef0", trial_id="t_00003", parent_run_id="parent-1", trial_key="key-1",
        trial_key_parts=parts, trial_key_without_code="key-1-nc", reused_from="run-0", reused_sweep="sct-old",
        reused_other_code=True, error="boom", failures=2, stopped_by_scheduler=True,
        checkpoint="s3://bucket/sweep/checkpoint_000004", checkpoint_step=120, model_state=ModelState.KEPT,
        model_uri="models:/m-1", evaluated_later=tuple(evaluated), evaluation_keys=keys, train_precision="bf16",
        eval_precision="fp32",
    )


def test_a_run_without_the_tags_reads_their_defaults():
    tags = trial_tags(run_with({}))
    assert tags == TrialTags()
    assert (tags.sweep_name, tags.trial_id, tags.parent_run_id, tags.trial_key, tags.trial_key_without_code,
            tags.reused_from, tags.checkpoint, tags.checkpoint_step, tags.model_state, tags.model_uri,
            tags.train_precision, tags.eval_precision) == (None,) * 12
    assert (tags.spec_file, tags.spec_hash, tags.budget, tags.git_commit, tags.reused_sweep, tags.error) == ("",) * 6
    assert (tags.failures, tags.reused_other_code, tags.stopped_by_scheduler) == (0, False, False)
    assert (tags.trial_key_parts, tags.evaluated_later, tags.evaluation_keys) == ({}, (), {})


def test_a_flag_is_set_by_true_only():
    tags = trial_tags(run_with({Tag.REUSED_OTHER_CODE: "false", Tag.STOPPED_BY_SCHEDULER: "True"}))
    assert (tags.reused_other_code, tags.stopped_by_scheduler) == (False, False)
