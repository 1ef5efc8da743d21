"""``none``: the untuned encoder, for the pooling x layer baselines.

With the ``pooling`` and ``pooling_layer`` knobs this gives SG-BERT's Figure 1
(every layer with cls/mean/max) and the "No tuning" rows of its Table 1.
"""

from trainers.method import Method

METHOD = Method(
    name="none",
    summary="No training: evaluate the pretrained encoder with a pooling rule.",
    defaults={"eval_max_length": 128},
    sources={"eval_max_length": "the papers' untuned rows encode as sentence-transformers' Transformer of their "
             "authors' code does, up to its default max_seq_length 128 (galsang/SG-BERT's 0.3.9; "
             "yym6472/ConSERT eval_pretrain.py)"},
)
