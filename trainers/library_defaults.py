"""What the authors' scripts leave at their training library's defaults, where those differ from ours: one
place for the values and the words that source them (``Method.defaults``, ``Method.sources``)."""

FIT_DEFAULTS = {"weight_decay": 0.01, "max_grad_norm": 1.0, "adam_implementation": "transformers",
                "adam_epsilon": 1e-6, "eval_grid": "epoch"}
"""sentence-transformers' ``fit()``, the SG-BERT, ConSERT and SCT authors' training loop: weight decay 0.01
(sparing biases and LayerNorm weights), gradients clipped at norm 1, the ``transformers.AdamW`` it builds and
that optimiser's eps 1e-6, and its evaluations every ``evaluation_steps`` of each epoch and at each epoch's
end (galsang/SG-BERT modules.py, yym6472/ConSERT and mrpeerat/SCT's copies)."""
FIT_SOURCES = {
    "weight_decay": "silent; the authors' fit() decays 0.01 (not biases and LayerNorm weights)",
    "max_grad_norm": "silent; the authors' fit() clips at norm 1",
    "adam_implementation": "silent; the authors' fit() builds transformers.AdamW (eps on the uncorrected sqrt(v))",
    "adam_epsilon": "silent; the authors' transformers.AdamW: eps 1e-6",
    "eval_grid": "silent; the authors' fit() evaluates every evaluation_steps of each epoch and at each epoch's end",
}
"""Where each of :data:`FIT_DEFAULTS` comes from, in a method's ``sources`` (after its paper's name)."""

TRAINER_DEFAULTS = {"max_grad_norm": 1.0, "adam_implementation": "transformers", "eval_grid": "trainer",
                    "eval_max_length": 512}
"""What the authors' scripts of SimCSE and of the methods built on its code (DCLR, DiffCSE) leave at Hugging
Face Trainer's defaults, where it differs from ours: gradients clipped at norm 1, the ``transformers.AdamW`` its
4.2.1 creates, and evaluations at the multiples of eval_steps alone (not after the last step); and their SentEval
batcher's encoding, untruncated (``batch_encode_plus(..., padding=True)``): BERT's 512 positions."""
