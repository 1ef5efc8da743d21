"""The device check: a trial's training steps, its evaluation and several trials on one GPU, measured in one call.

    python -m benchmarks.gpu --pack .gpu_carry --before COMMIT   # here: what the GPU machine needs, HEAD's code
                                                                 # in .gpu_carry/clean (docs/gpu.md)
    python -m benchmarks.gpu --unpack ..                # there, in .gpu_carry/clean: restore the model's weights
    PYTHONPATH=$PWD/../site python -m benchmarks.gpu --json gpu.json --legacy ../legacy   # there: measure
    python -m benchmarks.gpu --render gpu.json          # here: its section of benchmarks/results.md

Measured, on a CUDA device:

- **rates**: the card's matrix-product rate (TFLOP/s) in bf16, TF32 and fp32 (one 8192^3 product each);
- **steps**: ms per training step of SimCSE, SG-OPT, ConSERT and SCT (each method's defaults) at BERT-base's
  shape (random weights from ``BertConfig()``, the bundled uncased tokenizer) and at the bundled MiniLM's, in
  fp32, TF32 and bf16, through :func:`trainers.training.loop.train` with the objective on the device as a trial runs
  it; peak memory; FLOPs per step (``FlopCounterMode``) and their rate's share of the card's measured one;
- **compiled**: the SimCSE steps again with ``torch_compile: true`` (the transformer through torch.compile) in
  TF32 and bf16, in each of ``--compile-modes`` (``default``, and ``reduce-overhead``: each batch shape's
  forward and backward replayed as a CUDA graph), warmed up on one epoch over the timed steps' examples, so
  that the compiling and most shapes' recording fall before the timing; the warm-up's seconds beside them;
- **bare**: the same SimCSE step in a bare PyTorch loop, batches tokenised and on the device beforehand;
- **graphed** (CUDA only): the bare step with every batch padded to ``max_seq_length``, eager and captured as
  one CUDA graph (forward, backward and update): the step with no launches, the bound of a CUDA-graphed loop;
- **loop_graphed**: SimCSE's, SG-OPT's and ConSERT's steps through the loop at a fixed shape
  (``pad_to_max_length``), eager and replayed from one CUDA graph (``cuda_graph``), in each precision (on a CPU
  both run eagerly: the path, not the figure);
- **agreement**: the same methods' graphed steps against their eager ones on the same batches, from the same
  weights, dropout off: the losses and the trained weights, how far apart;
- **trials**: whole SimCSE trials with the bundled MiniLM (its defaults: one epoch of STS-B's sentences, the
  seven STS test sets after) in each of :data:`TRIAL_MODES`, eager and replayed, fp32, TF32, bf16 and ``auto``,
  for each of :data:`TRIAL_SEEDS`: their test scores, train seconds and replayed steps, to say whether the fastest
  step trains to the same scores (``train_precision: auto`` picks by it);
- **legacy** (``--legacy DIR``): SimCSE's, ConSERT's and SCT's steps through an older ``trainers/`` in ``DIR``
  (``--pack --before COMMIT`` takes the commit's), in TF32, in the same call;
- **evaluation**: the seven STS test sets with the bundled model: ours (token ids kept, and tokenised afresh)
  in each precision with its scores, at ``eval_batch_size`` 512 and through ``torch_compile`` (on a GPU also
  in ``reduce-overhead``, each padded length's forward a CUDA graph), against
  sentence-transformers' ``encode`` in fp32 and fp16;
- **sharing** (**sharing_graphed**, at BERT-base's shape and with MiniLM, with ``cuda_graph`` in bf16, 1, 2
  and 4; and **sharing_compiled**, at BERT-base's shape with ``torch_compile``, 1 and 4): 1, 2, 4 and 8
  processes each training SimCSE with the bundled MiniLM on the same GPU (1, 2
  and 4 at BERT-base's shape), as Ray Tune runs trials with ``resources.gpu`` 1, 0.5, 0.25 and 0.125, in
  ``train_precision: auto``: steps per second of all together;
- **sharing_mps** (CUDA only): 1 and 4 of the sharing part's processes under an NVIDIA MPS daemon of its own,
  through which their kernels can run side by side on the card instead of by turns; the daemon's log with them.

Each part is a module of this package (``bare``, ``graphs``, ``trials``, ``evaluation``, ``profiling``,
``sharing``, ``legacy``; what they share in ``common``); ``check`` runs them in order, ``carry`` packs what a call
carries, and ``report`` renders the figures.

Without a GPU it runs a tiny version of each (a 2-layer, 64-wide BERT; a few steps; 1 and 2 processes), which
``tests/test_benchmarks.py`` runs: every code path but the card's figures, the CUDA graph's capture and the MPS
daemon (tested with a stand-in for its control program).
"""

from benchmarks.gpu.check import main

__all__ = ["main"]
