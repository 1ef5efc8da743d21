"""WK pooling against SBERT-WK's reference implementation, side by side on STS-B test.

    python -m benchmarks.wk_reference [--max-pairs N]

The reference is the authors' numpy code ported line for line (github.com/BinWang28/SBERT-WK-Sentence-Embedding,
commit 889e669, ``utils.py``: ``generate_embedding.dissecting``, ``unify_token``, ``unify_sentence``; and
``SBERT_WK.py``'s ``batcher``: special tokens added, cut to ``max_seq_length`` 128, padded with id 0 to 128, all
hidden states of the batch): their repository cannot be installed. Ours is ``pooling: wk``
(:mod:`trainers.models.wk_pooling`) through :meth:`SentenceEncoder.encode`. Both use the bundled all-MiniLM-L6-v2 with
the reference's defaults (window 2, first layer 4) and the same scoring (Spearman x 100 of cosines, STS-B test's
1,379 pairs). The target: within 0.5 points of the reference. The figures go to benchmarks/results.md.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch
from sklearn.metrics.pairwise import cosine_similarity
from sklearn.preprocessing import normalize

from benchmarks.results_file import write_section
from trainers.data.sources import load_sts
from trainers.models.encoder import SentenceEncoder
from trainers.models.pretrained import BUNDLED_MODEL
from trainers.suites.sts import correlations, cosine_scores

TARGET = 0.5
REFERENCE_PARAMS = {"context_window_size": 2, "layer_start": 4, "max_seq_length": 128, "batch_size": 64}


# ---- the reference, as in utils.py (numpy, one sentence and one token at a time) ----

def unify_token(params: dict[str, Any], token_feature: np.ndarray) -> np.ndarray:
    window_size = params["context_window_size"]
    alpha_alignment = np.zeros(token_feature.shape[0])
    alpha_novelty = np.zeros(token_feature.shape[0])
    for k in range(token_feature.shape[0]):
        left_window = token_feature[k - window_size:k, :]
        right_window = token_feature[k + 1:k + window_size + 1, :]
        window_matrix = np.vstack([left_window, right_window, token_feature[k, :][None, :]])
        Q, R = np.linalg.qr(window_matrix.T)
        r = R[:, -1]
        alpha_alignment[k] = np.mean(normalize(R[:-1, :-1], axis=0), axis=1).dot(R[:-1, -1]) / (np.linalg.norm(r[:-1]))
        alpha_alignment[k] = 1 / (alpha_alignment[k] * window_matrix.shape[0] * 2)
        alpha_novelty[k] = abs(r[-1]) / (np.linalg.norm(r))
    alpha_alignment = alpha_alignment / np.sum(alpha_alignment)
    alpha_novelty = alpha_novelty / np.sum(alpha_novelty)
    alpha = alpha_novelty + alpha_alignment
    alpha = alpha / np.sum(alpha)
    return token_feature.T.dot(alpha)


def unify_sentence(sentence_feature: np.ndarray, one_sentence_embedding: np.ndarray) -> np.ndarray:
    sent_len = one_sentence_embedding.shape[0]
    var_token = np.zeros(sent_len)
    for token_index in range(sent_len):
        token_feature = sentence_feature[:, token_index, :]
        sim_map = cosine_similarity(token_feature)
        var_token[token_index] = np.var(sim_map.diagonal(-1))
    var_token = var_token / np.sum(var_token)
    return one_sentence_embedding.T.dot(var_token)


def dissecting(params: dict[str, Any], all_layer_embedding: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """``all_layer_embedding``: [sentences, hidden states, tokens, dim]; ``masks``: [sentences, tokens]."""
    unmask_num = np.sum(masks, axis=1) - 1  # not considering the last item
    all_layer_embedding = np.array(all_layer_embedding)[:, params["layer_start"]:, :, :]
    embedding = []
    for sent_index in range(len(unmask_num)):
        sentence_feature = all_layer_embedding[sent_index, :, :unmask_num[sent_index], :]
        one_sentence_embedding = [unify_token(params, sentence_feature[:, token_index, :])
                                  for token_index in range(sentence_feature.shape[1])]
        embedding.append(unify_sentence(sentence_feature, np.array(one_sentence_embedding)))
    return np.array(embedding)


@torch.inference_mode()
def reference_batcher(encoder: SentenceEncoder, params: dict[str, Any], sentences: list[str]) -> np.ndarray:
    """SBERT_WK.py's batcher: ids with special tokens, cut and padded (id 0) to max_seq_length, all hidden states."""
    ids, masks = [], []
    for sentence in sentences:
        sent_ids = encoder.tokenizer.encode(sentence, add_special_tokens=True)[:params["max_seq_length"]]
        padding = params["max_seq_length"] - len(sent_ids)
        ids.append(sent_ids + [0] * padding)
        masks.append([1] * len(sent_ids) + [0] * padding)
    output = encoder.model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(masks), output_hidden_states=True)
    all_layer_embedding = torch.stack(output.hidden_states).permute(1, 0, 2, 3).cpu().numpy()
    return dissecting(params, all_layer_embedding, np.array(masks))


def reference_encode(encoder: SentenceEncoder, params: dict[str, Any], sentences: list[str]) -> torch.Tensor:
    size = params["batch_size"]
    return torch.from_numpy(np.concatenate([reference_batcher(encoder, params, sentences[i:i + size])
                                            for i in range(0, len(sentences), size)]))


# ---- side by side ----

def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.wk_reference")
    parser.add_argument("--max-pairs", type=int, default=0, help="Only the first N pairs of STS-B test (0 = all).")
    args = parser.parse_args(argv)
    params = REFERENCE_PARAMS
    sts = load_sts("local", ["stsb-test"])["stsb-test"]
    n = args.max_pairs or len(sts)
    left, right, gold = list(sts.sentence1[:n]), list(sts.sentence2[:n]), sts.scores[:n]
    encoder = SentenceEncoder.from_pretrained(BUNDLED_MODEL, pooling="wk",
                                              wk=(params["context_window_size"], params["layer_start"])).eval()
    results = {}
    for label, encode in (
        ("SBERT-WK reference (numpy port, per token)", lambda s: reference_encode(encoder, params, s)),
        ("ours (`pooling: wk`, batched torch)", lambda s: encoder.encode(s, batch_size=128, max_length=128)),
    ):
        started = time.perf_counter()
        spearman = correlations(cosine_scores(encode(left).float(), encode(right).float()), gold)[0]
        results[label] = (spearman, time.perf_counter() - started)
    (reference, _), (ours, _) = results.values()
    gap = abs(ours - reference)
    rows = "\n".join(f"| {label} | {score:.2f} | {seconds:.1f} |" for label, (score, seconds) in results.items())
    body = f"""Command: `python -m benchmarks.wk_reference{f' --max-pairs {n}' if args.max_pairs else ''}` \
(all-MiniLM-L6-v2, STS-B test, {n} pairs; window {params['context_window_size']}, \
first hidden state {params['layer_start']} of 0..6, fp32; {time.strftime('%Y-%m-%d')}).

| side | STS-B test Spearman x 100 | seconds |
| --- | --- | --- |
{rows}

Difference: **{gap:.3f}** points (target <= {TARGET}{'' if gap <= TARGET else ': MISSED'})."""
    write_section("WK pooling against SBERT-WK's reference", body)
    print(body)


if __name__ == "__main__":
    main()
