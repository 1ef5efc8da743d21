"""ConSERT (Yan et al., ACL 2021): contrastive learning with token-level augmentations.

One shared encoder; each sentence gets two views made at the embedding layer
by transformations T1 (``aug1``) and T2 (``aug2``); the views are mean-pooled
over the last layer and NT-Xent over the 2N views pulls each pair together
(Section 3, Eq. 1). BERT's own dropout is removed, as the paper does, because
cutoff and dropout augmentations replace it. Defaults are Section 4.1's; the
epochs and early-stopping patience, which the paper leaves open, are those of
the authors' unsupervised script (10 epochs, patience 10 evaluations).

Supervised settings (Section 3.3, knob ``supervision``), all on labelled NLI
(SNLI + MultiNLI) from the Hugging Face hub, never on substitute data:
``sup`` trains with L_ce (Eq. 2) only (the SBERT-NLI baseline), ``joint`` with
L_joint = L_ce + alpha L_con; ``sup-unsup`` and ``joint-unsup`` are two stages
of the shared loop: one epoch of ``sup``/``joint`` (own learning rate, best
STS-B dev state kept), then the unsupervised transfer on ``train_corpus`` from
there. Both stages are reported and checkpointed. ``transfer_limit`` limits the
transfer's unlabelled texts and leaves the NLI pairs whole (Section 5.3's
few-shot setting under supervision). In joint training, as in the authors' code, each
side of a pair (premises, hypotheses) gets NT-Xent between its plain view,
whose vector also feeds L_ce, and an augmented view (``nli_augmentation``),
which may be FGV adversarial attack (Section 3.2) because L_ce is there to
attack.
"""

from __future__ import annotations

import dataclasses

from trainers.common_knobs import AUGMENTATIONS, NLI_STAGE_KNOBS, RATE_KNOBS, SHARED_STAGE_KNOBS, STEP_GRAPH_KNOBS
from trainers.data.nli_examples import nli_examples, nli_hub_problems
from trainers.knobs import Exchangeable, Knob, KnobSet, Problem
from trainers.library_defaults import FIT_DEFAULTS, FIT_SOURCES
from trainers.method import Config, Method, Stage

SUPERVISIONS = ("none", "sup", "joint", "sup-unsup", "joint-unsup")
NLI_ONLY = ("sup", "joint")
"""Settings whose trial trains on NLI only; the others end with unsupervised transfer."""
NLI_AUGMENTATIONS = AUGMENTATIONS + ("adversarial",)


def nli_stage(supervision: str) -> Stage:
    """Training on labelled NLI: L_ce ('sup') or L_joint ('joint'), which the objective reads from
    ``supervision``."""
    return Stage(supervision.split("-")[0], "trainers.objectives.consert:NLIObjective", nli_examples,
                 reads_corpus=False)


TWO_STAGES = ("sup-unsup", "joint-unsup")
"""Settings whose NLI stage is followed by unsupervised transfer (what ``transfer_limit`` limits)."""
TRANSFER = Stage("unsup", "trainers.objectives.consert:ConSERTObjective")


def transfer_stage(config: Config) -> Stage:
    """The unsupervised transfer after an NLI stage, on the first ``transfer_limit`` texts of
    ``train_corpus`` when it is set (the smaller limit where ``train_limit`` is set too)."""
    limits = [limit for limit in (config["train_limit"], config["transfer_limit"]) if limit]
    return dataclasses.replace(TRANSFER, overrides={"train_limit": min(limits)}) if limits else TRANSFER


def stages(config: Config) -> tuple[Stage, ...]:
    """'none': unsupervised transfer. 'sup'/'joint': the NLI stage alone. 'sup-unsup'/'joint-unsup': one
    epoch of the NLI stage at ``nli_learning_rate``, whose best STS-B dev state the transfer starts from,
    as the authors' scripts hand their best checkpoint on."""
    supervision = config["supervision"]
    if supervision == "none":
        return (TRANSFER,)
    if supervision in NLI_ONLY:
        return (nli_stage(supervision),)
    first = dataclasses.replace(
        nli_stage(supervision), overrides={"learning_rate": config["nli_learning_rate"], "epochs": 1, "patience": 0}
    )
    return first, transfer_stage(config)


def check(config: Config) -> list[Problem]:
    supervision = config["supervision"]
    problems = []
    if config["transfer_limit"] and supervision not in TWO_STAGES:
        instead = ("use train_limit, which limits the same texts when there is no NLI stage" if supervision == "none"
                   else "there is no transfer stage")
        problems.append(Problem("transfer_limit", f"limits the unlabelled texts of the transfer after an NLI stage "
                        f"(supervision {' or '.join(map(repr, TWO_STAGES))}); with {supervision!r} {instead}"))
    if config["cuda_graph"] and supervision != "none":
        problems.append(Problem("cuda_graph", "records the step of the unsupervised transfer; the NLI stage of "
                                f"supervision {supervision!r} is not split for it: set cuda_graph false or "
                                "supervision 'none'"))
    elif config["pad_to_max_length"] and supervision in NLI_ONLY:
        problems.append(Problem("pad_to_max_length", "pads the batches of the unsupervised transfer, and "
                                f"supervision {supervision!r} has none: set pad_to_max_length false"))
    if supervision != "none":
        problems += nli_hub_problems("supervision", repr(supervision), "use supervision 'none' to train without labels",
                                     config["nli_pairs"])
    return problems


METHOD = Method(
    name="consert",
    summary="ConSERT: two token-level augmented views of each sentence, NT-Xent over the 2N views.",
    knobs=KnobSet(
        (
            Knob("aug1", str, "shuffle", "Transformation T1 at the embedding layer.", choices=AUGMENTATIONS),
            Knob("aug2", str, "feature_cutoff", "Transformation T2 at the embedding layer (Shuffle + Feature "
                 "Cutoff is the paper's best pair).", choices=AUGMENTATIONS),
            Knob("temperature", float, 0.1, "Temperature tau of NT-Xent.", low=1e-4, high=10.0),
            Knob("remove_bert_dropout", bool, True, "Set BERT's own dropout to 0, as the paper does for unsupervised "
                 "transfer (the authors' supervised scripts keep it)."),
            Knob("supervision", str, "none", "Section 3.3: 'none' (unsupervised transfer on train_corpus), 'sup' "
                 "(L_ce on labelled NLI: SBERT-NLI), 'joint' (L_ce + joint_weight x L_con on NLI), 'sup-unsup' / "
                 "'joint-unsup' (one epoch of sup / joint at nli_learning_rate, then unsupervised transfer). "
                 "All but 'none' need labelled NLI from the Hugging Face hub.", choices=SUPERVISIONS),
            Knob("joint_weight", float, 0.15, "alpha of L_joint = L_ce + alpha L_con (Section 4.1); L_con is NT-Xent "
                 "over the premises' views plus NT-Xent over the hypotheses' views, each the average over the 2N "
                 "anchors, as Section 3.1 says. The authors' code adds each NT-Xent's two directions' means (loss_a + "
                 "loss_b), twice that average: their runs at 0.15 are 0.3 here.", low=0.0, high=100.0),
            Knob("transfer_weight", float, 1.0, "Weight of L_con in unsupervised transfer: 1, Eq. 1's NT-Xent, the "
                 "average over the 2N anchors (Section 3.1). The authors' scripts multiply by --cl_rate 0.15 their "
                 "NT-Xent, which adds both directions' means (twice the average): 0.3 runs theirs. The updates are "
                 "the same while the clip at max_grad_norm rescales both gradients to its norm; they part where the "
                 "smaller one passes under it, and through Adam's epsilon.", low=0.0, high=100.0),
            Knob("nli_augmentation", str, "token_cutoff", "The augmented view of joint training's contrastive loss; "
                 "the other view is the plain sentence (the authors' joint script: token cutoff). 'adversarial' is "
                 "FGV on L_ce (Section 3.2).", choices=NLI_AUGMENTATIONS),
            Knob("adversarial_norm", float, 1.0, "L2 norm of the FGV perturbation of each token's embedding-layer "
                 "vector (the authors' default).", low=0.0, high=100.0),
            Knob("transfer_limit", int, 0, "Use only the first N unlabelled texts of train_corpus in the transfer "
                 "after the NLI stage of 'sup-unsup' and 'joint-unsup' (0 = all), the NLI pairs left whole: Section "
                 "5.3's few-shot setting under supervision (Figure 6). train_limit caps the examples of every stage, "
                 "the NLI pairs too; without an NLI stage ('none') train_limit is the knob that limits the texts.",
                 low=0, corpus=True),
        )
    )
    + RATE_KNOBS
    + NLI_STAGE_KNOBS + SHARED_STAGE_KNOBS
    + STEP_GRAPH_KNOBS,
    defaults={
        "pooling": "last2avg",  # the authors' README: reported numbers average the last two layers
        "max_seq_length": 64,
        "eval_max_length": 64,  # Section 4.1's max length: the authors' eval.py encodes with the saved model's 64
        "batch_size": 96,
        "optimizer": "adamw",  # Section 4.1's "Adam": the authors' transformers.AdamW, its decay decoupled
        "learning_rate": 5e-7,
        "warmup_ratio": 0.1,
        "eval_every": 200,
        "train_corpus": "sts_all_sentences",
        "epochs": 10,  # the authors' unsupervised script (--num_epochs 10 --patience 10)
        "patience": 10,
        **FIT_DEFAULTS,  # Section 4.1 is silent on these: the authors' main.py and its fit()
        "adam_bias_correction": False,
        "selection_pooling": "mean",  # the authors' dev evaluator encodes with their training pooling
    },
    stages=stages,
    check=check,
    views=lambda config: f"{config['aug1']} + {config['aug2']}",
    sources={knob: f"ConSERT (Yan et al. 2021), {what}" for knob, what in {
        "pooling": "the authors' README: reported numbers average the last two layers",
        "max_seq_length": "Section 4.1 / the authors' script: max length 64",
        "eval_max_length": "Section 4.1: max length 64, which the authors' eval.py keeps (the saved model's)",
        "batch_size": "Section 4.1: batch 96",
        "optimizer": "Section 4.1: Adam; the authors' main.py: transformers.AdamW, whose weight decay is "
        "decoupled", **FIT_SOURCES, "adam_bias_correction": "silent; the authors' main.py: correct_bias False",
        "fp16_schedule": "silent; the authors' fit() under apex O1 steps the scheduler every step (apex skips an "
        "overflowed update itself)",
        "selection_pooling": "silent; the authors' main.py selects on STS-B dev with the model's pooling, the last "
        "layer's mean (its training pooling); last2avg only in the test (eval.py, the README's numbers)",
        "learning_rate": "Section 4.1: lr 5e-7",
        "final_state": "Section 4.1: the best dev checkpoint is tested", "warmup_ratio": "Section 4.1: "
        "linear warm-up over 10% of the steps", "temperature": "Section 4.1: tau 0.1",
        "epochs": "the authors' unsupervised script: --num_epochs 10", "patience": "the authors' unsupervised "
        "script: --patience 10", "early_stopping_rule": "the authors' fit(): patience counts evaluations without "
        "a better dev score, reset by one", "train_corpus": "Section 4.1: the unlabelled texts of the seven STS sets",
        "adam_beta2": "Adam's beta2 0.999", "views": "Section 5.2: shuffle + feature cutoff, the best pair",
    }.items()},
    exchangeable=(
        Exchangeable(
            ("aug1", "aug2"),
            "NT-Xent over the 2N views is symmetric in its two views and both views pass the same encoder, so "
            "(T1, T2) and (T2, T1) differ only in which random draws each augmentation gets",
        ),
    ),
)
