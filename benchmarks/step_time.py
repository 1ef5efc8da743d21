"""Training-step time of each method through the shared loop, against a minimal
plain-PyTorch loop doing the same forward and backward, in one command.

    python -m benchmarks.step_time [--steps 15] [--methods sg consert sct]

Both sides use the bundled all-MiniLM-L6-v2, the method's default batch size
and the same batches; the plain loop calls the same pure loss functions and makes
the method's own update (its optimiser, decay groups and clipping), so the maths
is not what is measured: the loop machinery is. Figures go to
benchmarks/results.md. Also measured: what SG's table of BERT_F's views (``bert_f_dropout`` false) saves, and the
peak memory of an SCT step with a 262,144 x 384 queue.
"""

from __future__ import annotations

import argparse
import copy
import subprocess
import sys
import time
from typing import Callable

import torch
import torch.nn.functional as F

from benchmarks.results_file import write_section
from trainers.data.sources import load_corpus
from trainers.losses.contrastive import nt_xent
from trainers.losses.sct import sct_loss
from trainers.losses.self_guided import parameter_distance, sg_opt3_loss
from trainers.models.encoder import SentenceEncoder, pick_device
from trainers.models.pretrained import BUNDLED_MODEL, FAMILIES
from trainers.registry import get_method
from trainers.training.loop import train
from trainers.training.precision import cpu_runs_bf16_fast
from trainers.views.embedding import shuffled_position_ids

WARMUP = 3


class NoEvaluation:
    """Stands in for the STS evaluator: the benchmark times training steps only."""

    def dev(self, encode):
        return {"dev_spearman": 0.0}


def timed_steps(objective, examples: list, config: dict, device: torch.device, warmup: int,
                at_warmup: Callable[[], None] = lambda: None) -> tuple[float, float]:
    """Train through :func:`trainers.training.loop.train` and time the steps after the first ``warmup``: (seconds per
    step, the wall clock when the last one finished). The device is synchronised only at the two marks, so the
    timed steps keep their queued work in flight as a trial's do and the marks still count all of it."""
    marks: list[float] = []
    finished: list[float] = []
    done = [0]
    steps = config["max_steps"] - warmup
    original = objective.after_step

    def timed_after_step() -> None:
        original()
        done[0] += 1
        if done[0] in (warmup, warmup + steps):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if done[0] == warmup:
                at_warmup()
            marks.append(time.perf_counter())
            finished.append(time.time())

    objective.after_step = timed_after_step
    train(objective, examples, config, NoEvaluation(), lambda metrics: None)
    if len(marks) < 2:
        raise ValueError(f"the examples ran out after {done[0]} of {config['max_steps']} steps: time fewer steps")
    return (marks[1] - marks[0]) / steps, finished[-1]


def loop_step_seconds(method: str, steps: int, **overrides) -> float:
    """Seconds per step of the shared loop, with the encoder and the objective on the trial's device
    (``device``, as :func:`trainers.training.loop.run_trial` puts them). On a GPU, ``python -m benchmarks.gpu`` measures
    more (precisions, BERT-base's shape, trials sharing the card) with the same :func:`timed_steps`."""
    torch.manual_seed(0)
    config = get_method(method).resolve({"max_steps": steps + WARMUP, "eval_every": 10**6, **overrides})
    (stage,) = get_method(method).stages(config)
    device = pick_device(config["device"])
    objective = stage.build(config, SentenceEncoder.from_config(config).to(device)).to(device)
    examples = load_corpus(config["train_corpus"])[: config["batch_size"] * (steps + WARMUP)]
    return timed_steps(objective, examples, config, device, WARMUP)[0]


def plain_loop_seconds(method: str, step: Callable[[list[str]], torch.Tensor], trained: torch.nn.Module,
                       batches: list[list[str]]) -> float:
    """Seconds per step of a plain loop over ``batches``: ``step``'s loss, then the update ``method`` makes by
    default (its optimiser over ``trained``'s trainable parameters, its clipping), as the shared loop does."""
    # Here, not at the top: benchmarks.gpu imports this module beside an older commit's trainers (its legacy part).
    from trainers.training.optimization import make_optimizer, update

    config = get_method(method).resolve({})
    optimizer = make_optimizer(config, trained)
    for index, batch in enumerate(batches):
        if index == WARMUP:
            started = time.perf_counter()
        update(step(batch), optimizer, config["max_grad_norm"])
        optimizer.zero_grad(set_to_none=True)
    return (time.perf_counter() - started) / (len(batches) - WARMUP)


def plain_sg(steps: int) -> float:
    # Imported here: benchmarks.gpu imports this module and runs against older trainers/ (benchmarks.gpu.legacy),
    # which may lack trainers.models.pooling; the plain loops run against this checkout's alone.
    from trainers.models.pooling import masked_max

    torch.manual_seed(0)
    encoder = SentenceEncoder.from_pretrained(BUNDLED_MODEL)
    tuned, tokenizer = encoder.model, encoder.tokenizer
    fixed = copy.deepcopy(tuned).eval().requires_grad_(False)
    tuned.embeddings.requires_grad_(False)
    head = torch.nn.Sequential(torch.nn.Linear(384, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096),
                               torch.nn.GELU())
    tuned.train()

    def step(batch: list[str]) -> torch.Tensor:
        features = tokenizer(batch, padding=True, truncation=True, max_length=128, return_tensors="pt")
        with torch.no_grad():
            states = fixed(**features, output_hidden_states=True).hidden_states
            views = torch.stack([masked_max(s, features["attention_mask"]) for s in states], dim=1)
        cls = tuned(**features).last_hidden_state[:, 0]
        return sg_opt3_loss(head(cls), head(views), 0.01) + 0.1 * parameter_distance(tuned, fixed)

    corpus = load_corpus("stsb_sentences")
    batches = [corpus[i * 16 : (i + 1) * 16] for i in range(steps + WARMUP)]
    return plain_loop_seconds("sg", step, torch.nn.ModuleList([tuned, head]), batches)


def feature_cutoff(module, inputs, output):
    """A forward hook erasing 20% of each sentence's feature columns, written out by hand."""
    out = output.clone()
    for i in range(len(out)):
        out[i, :, torch.randperm(out.shape[-1])[: int(out.shape[-1] * 0.2)]] = 0.0
    return out


def plain_consert(steps: int) -> float:
    from trainers.models.pooling import masked_mean

    torch.manual_seed(0)
    encoder = SentenceEncoder.from_pretrained(BUNDLED_MODEL)
    model, tokenizer = encoder.model, encoder.tokenizer
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    model.train()

    def step(batch: list[str]) -> torch.Tensor:
        features = tokenizer(batch, padding=True, truncation=True, max_length=64, return_tensors="pt")
        mask = features["attention_mask"]
        positions = shuffled_position_ids(mask.sum(1).tolist(), mask.shape[1], FAMILIES["bert"], 0)
        first = masked_mean(model(**features, position_ids=positions).last_hidden_state, mask)
        hook = model.embeddings.register_forward_hook(feature_cutoff)
        second = masked_mean(model(**features).last_hidden_state, mask)
        hook.remove()
        return nt_xent(first, second, 0.1)

    corpus = load_corpus("sts_all_sentences")
    batches = [corpus[i * 96 : (i + 1) * 96] for i in range(steps + WARMUP)]
    return plain_loop_seconds("consert", step, model, batches)


def plain_sct(steps: int) -> float:
    from trainers.models.pooling import masked_mean

    torch.manual_seed(0)
    encoder = SentenceEncoder.from_pretrained(BUNDLED_MODEL)
    model, tokenizer = encoder.model, encoder.tokenizer
    layers = []
    for _ in range(3):
        layers += [torch.nn.Linear(384, 3840), torch.nn.ReLU(), torch.nn.Linear(3840, 384)]
    head = torch.nn.Sequential(*layers)
    queues = [F.normalize(torch.randn(65536, 384), dim=1) for _ in range(2)]
    pointer, pending = [0], []
    model.train()

    def encode(network, features, view, seed):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            if view == "shuffle":
                mask = features["attention_mask"]
                positions = shuffled_position_ids(mask.sum(1).tolist(), mask.shape[1], FAMILIES["bert"], 0)
                out = network(**features, position_ids=positions)
            else:
                hook = network.embeddings.register_forward_hook(feature_cutoff)
                out = network(**features)
                hook.remove()
        return masked_mean(out.last_hidden_state, features["attention_mask"])

    def step(batch: list[str]) -> torch.Tensor:
        if pending:  # enqueue the previous step's references, after its backward pass
            refs = pending.pop()
            positions = (pointer[0] + torch.arange(len(refs[0]))) % 65536
            for queue, ref in zip(queues, refs):
                queue[positions] = ref
            pointer[0] = (pointer[0] + len(refs[0])) % 65536
        features = tokenizer(batch, padding=True, truncation=True, max_length=64, return_tensors="pt")
        online, refs = [], []
        for view in ("shuffle", "feature_cutoff"):
            seed = int(torch.randint(2**31 - 1, ()))
            online.append(F.normalize(head(encode(model, features, view, seed)), dim=1))
            with torch.no_grad():  # f_ref: f_theta encodes the view again, without gradient (reference 'online')
                refs.append(F.normalize(encode(model, features, view, seed + 1), dim=1))
        pending.append(refs)
        extended = (torch.cat([queues[0], refs[0]]), torch.cat([queues[1], refs[1]]))  # the batch enters the queues
        return sct_loss(tuple(online), tuple(refs), extended, 0.03, 0.02)

    corpus = load_corpus("sts_all_sentences")
    batches = [corpus[i * 128 : (i + 1) * 128] for i in range(steps + WARMUP)]
    return plain_loop_seconds("sct", step, torch.nn.ModuleList([model, head]), batches)


PLAIN = {"sg": plain_sg, "consert": plain_consert, "sct": plain_sct}
UNSHARED = {"sg": {"share_frozen_outputs": False, "bert_f_dropout": False}}  # plain_sg's BERT_F: no dropout
DESCRIPTION = {
    "sg": "SG-OPT (L_opt3), batch 16, max length 128",
    "consert": "ConSERT shuffle + feature cutoff, batch 96, max length 64",
    "sct": "SCT shuffle + feature cutoff, batch 128, k = 65,536",
}


def sct_memory_mib(queue_size: int) -> tuple[float, float]:
    """(resident, peak resident) memory of a fresh process after three SCT steps, in MiB. The
    queues are alive after the steps, so the difference in resident memory between two queue
    sizes is what the queues cost; the peak is the whole trial's high-water mark."""
    code = (
        "from benchmarks.step_time import loop_step_seconds; "
        f"loop_step_seconds('sct', 1, queue_size={queue_size}, model_layers=2); "
        "status = dict(l.split(':', 1) for l in open('/proc/self/status')); "
        "print(status['VmRSS'].split()[0], status['VmHWM'].split()[0])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    resident, peak = out.strip().splitlines()[-1].split()
    return int(resident) / 1024, int(peak) / 1024


def precision_section(args: argparse.Namespace) -> None:
    """Seconds per step of each method at its defaults, fp32 against bf16 autocast, interleaved."""
    rows = []
    for method in args.methods:
        best = {"fp32": float("inf"), "bf16": float("inf")}
        for _ in range(args.repeats):
            for setting in best:
                seconds = loop_step_seconds(method, args.steps, train_precision=setting)
                best[setting] = min(best[setting], seconds)
        rows.append(f"| {DESCRIPTION[method]} | {best['fp32']:.3f} | {best['bf16']:.3f} | "
                    f"{best['fp32'] / best['bf16']:.2f}x |")
        print(rows[-1], flush=True)
    body = [
        f"Command: `python -m benchmarks.step_time --train-precision --steps {args.steps} --repeats {args.repeats}` "
        f"(bundled all-MiniLM-L6-v2, each method's defaults, {torch.get_num_threads()} torch threads, CPU with "
        f"AMX / AVX-512 bf16: {'yes' if cpu_runs_bf16_fast() else 'no'}, {time.strftime('%Y-%m-%d')}; seconds per "
        "step of the shared loop, fastest of the interleaved repeats).",
        "",
        "| method | fp32 (s/step) | bf16 autocast (s/step) | speed-up |",
        "| --- | ---: | ---: | ---: |",
        *rows,
    ]
    write_section("Training in bf16 on the CPU", "\n".join(body))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.step_time")
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=2, help="Interleaved runs of each side; the fastest counts.")
    parser.add_argument("--methods", nargs="+", default=list(PLAIN), choices=list(PLAIN))
    parser.add_argument("--train-precision", action="store_true",
                        help="Only measure the shared loop's steps in fp32 against bf16 autocast (train_precision).")
    args = parser.parse_args(argv)
    torch.set_num_threads(torch.get_num_threads())
    if args.train_precision:
        precision_section(args)
        return
    rows = []
    for method in args.methods:
        # Interleaved repeats, best of each: a busy neighbour slows one run, not the figure.
        plain = ours = float("inf")
        for _ in range(args.repeats):
            plain = min(plain, PLAIN[method](args.steps))
            # The plain loops compute every frozen output every step: so does ours here (the machinery is measured).
            ours = min(ours, loop_step_seconds(method, args.steps, **UNSHARED.get(method, {})))
        rows.append(f"| {DESCRIPTION[method]} | {plain:.3f} | {ours:.3f} | {ours / plain:.2f} |")
        print(rows[-1], flush=True)
    body = [
        f"Command: `python -m benchmarks.step_time --steps {args.steps} --repeats {args.repeats}` "
        "(bundled all-MiniLM-L6-v2, "
        f"{torch.get_num_threads()} torch threads, CPU, {time.strftime('%Y-%m-%d')}; seconds per step after "
        f"{WARMUP} warm-up steps, fastest of the interleaved repeats; target ratio <= 1.15).",
        "",
        "| method | plain PyTorch loop (s/step) | shared loop (s/step) | ratio |",
        "| --- | ---: | ---: | ---: |",
        *rows,
    ]
    if "sg" in args.methods:
        live = tabled = float("inf")
        for _ in range(args.repeats):  # interleaved, the fastest of each
            live = min(live, loop_step_seconds("sg", args.steps, bert_f_dropout=True))
            tabled = min(tabled, loop_step_seconds("sg", args.steps, bert_f_dropout=False, epochs=6,
                                                   train_limit=16 * 4))
        body += ["", f"SG's BERT_F: run live each step with its dropout on (`bert_f_dropout: true`, the default) "
                 f"{live:.3f} s/step; its views tabled once and read (`bert_f_dropout: false`, 4 batches x up to "
                 f"6 epochs) {tabled:.3f} s/step ({live / tabled:.2f}x)."]
    if "sct" in args.methods:
        (small, _), (large, peak) = sct_memory_mib(128), sct_memory_mib(262144)
        body += ["", f"SCT memory after 3 steps (fresh process, 2-layer student, batch 128): resident "
                 f"{small:.0f} MiB with k = 128, {large:.0f} MiB with k = 262,144 (two 262,144 x 384 float32 "
                 f"queues: {large - small:.0f} MiB more; 768 MiB in theory); peak resident memory of the "
                 f"k = 262,144 trial: {peak:.0f} MiB."]
    write_section("Training step time", "\n".join(body))
    print("\n".join(body))


if __name__ == "__main__":
    main()
