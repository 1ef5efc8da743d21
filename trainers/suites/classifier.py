"""SentEval's classifier on frozen sentence vectors and its three validation protocols
(Conneau and Kiela 2018, ``senteval/tools/classifier.py`` and ``validation.py``).

The classifier is SentEval's PyTorch one: ``Linear -> Sigmoid -> Linear`` with ``hidden`` units (0 =
logistic regression, one ``Linear``), Adam at its default rate, an L2 penalty as Adam's weight decay,
batches of 64; each round trains ``epoch_size`` passes and scores the validation data, and training
stops after ``tenacity`` rounds without a better validation accuracy, keeping the best state.
SG-BERT Table 9 sets hidden 50, batch 64, tenacity 5, epoch size 4, 10 folds. scikit-learn gives the
folds (``StratifiedKFold``, SentEval's splitter and seeds); its LogisticRegression is not SentEval's
``nhid 0`` classifier (L-BFGS to the optimum, no early stopping), so it is not used.

Protocols, as SentEval assigns them:

- :func:`inner_kfold_accuracy` (MR, CR, SUBJ, MPQA): k outer folds; in each, the L2 penalty is chosen
  by an inner k-fold on the outer training part, then trained on that part (5% held out to stop) and
  tested on the outer fold; the mean test accuracy.
- :func:`kfold_accuracy` (TREC, MRPC): the penalty chosen by k-fold on the training set, then trained
  on it (5% held out) and tested on the standard test set.
- :func:`split_accuracy` (SST2, SICK-E, SNLI): the penalty chosen on the standard dev set, trained on
  train with dev to stop, tested on test.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch
from sklearn.model_selection import StratifiedKFold
from torch import nn

PENALTIES = tuple(10.0**t for t in range(-5, -1))
"""SentEval's L2 penalties for its PyTorch classifier (1e-5 .. 1e-2)."""
SPLIT_SEED = 1111
"""SentEval's seed of the outer and inner folds of MR/CR/SUBJ/MPQA."""


@dataclass(frozen=True)
class ClassifierConfig:
    hidden: int = 50
    batch_size: int = 64
    tenacity: int = 5
    epoch_size: int = 4
    max_epoch: int = 200
    seed: int = 1111

    @classmethod
    def named(cls, classifier: str, seed: int, **overrides) -> "ClassifierConfig":
        """``mlp`` (Table 9: 50 hidden units) or ``logreg`` (SentEval's nhid 0)."""
        return cls(hidden=50 if classifier == "mlp" else 0, seed=seed, **overrides)


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """Train the small classifier on one CPU thread: its matrices are too small to share out, and on a
    busy machine torch's thread pool made one fit 35x slower (measured here: 5.9 s against 0.17 s)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class Classifier:
    """SentEval's PyTorch classifier (``senteval.tools.classifier.MLP``), on the CPU."""

    def __init__(self, config: ClassifierConfig, dim: int, classes: int, penalty: float):
        self.config = config
        self.random = np.random.RandomState(config.seed)
        torch.manual_seed(config.seed)
        if config.hidden:
            self.model = nn.Sequential(nn.Linear(dim, config.hidden), nn.Sigmoid(), nn.Linear(config.hidden, classes))
        else:
            self.model = nn.Sequential(nn.Linear(dim, classes))
        self.optimizer = torch.optim.Adam(self.model.parameters(), weight_decay=penalty)
        self.loss = nn.CrossEntropyLoss()

    @single_thread()
    def fit(self, x: np.ndarray, y: np.ndarray, dev_x: np.ndarray, dev_y: np.ndarray) -> float:
        """Train until ``tenacity`` rounds bring no better dev accuracy; keep the best state."""
        x_t, y_t = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.long)
        best, best_state, without_gain, epoch = -1.0, None, 0, 0
        while epoch <= self.config.max_epoch:
            self.model.train()
            for _ in range(self.config.epoch_size):
                order = torch.as_tensor(self.random.permutation(len(x_t)))
                for start in range(0, len(order), self.config.batch_size):
                    batch = order[start : start + self.config.batch_size]
                    loss = self.loss(self.model(x_t[batch]), y_t[batch])
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
            epoch += self.config.epoch_size
            accuracy = self.score(dev_x, dev_y)
            if accuracy > best:
                best, best_state = accuracy, copy.deepcopy(self.model.state_dict())
            else:  # as SentEval: the count is never reset, and checked before it grows (tenacity + 1 rounds)
                if without_gain >= self.config.tenacity:
                    break
                without_gain += 1
        self.model.load_state_dict(best_state)
        return best

    @torch.no_grad()
    def predict(self, x: np.ndarray) -> np.ndarray:
        self.model.eval()
        return self.model(torch.as_tensor(x, dtype=torch.float32)).argmax(1).numpy()

    def score(self, x: np.ndarray, y: np.ndarray) -> float:
        return float((self.predict(x) == y).mean())

    def fit_holding_out(self, x: np.ndarray, y: np.ndarray, share: float = 0.05) -> float:
        """Train on ``x`` with a random ``share`` held out to stop on (SentEval's ``validation_split``)."""
        order = self.random.permutation(len(x))
        cut = int(share * len(x))
        return self.fit(x[order[cut:]], y[order[cut:]], x[order[:cut]], y[order[:cut]])


def _classes(*labels: np.ndarray) -> int:
    return int(max(label.max() for label in labels)) + 1


def _train_score(config: ClassifierConfig, penalty: float, train: tuple, dev: tuple, classes: int) -> float:
    model = Classifier(config, train[0].shape[1], classes, penalty)
    model.fit(*train, *dev)
    return model.score(*dev)


def _best_penalty(config: ClassifierConfig, x: np.ndarray, y: np.ndarray, folds: StratifiedKFold,
                  classes: int) -> tuple[float, float]:
    """(penalty, its mean cross-validated accuracy x 100), the first best as SentEval's argmax."""
    scores = []
    for penalty in PENALTIES:
        accuracies = [_train_score(config, penalty, (x[a], y[a]), (x[b], y[b]), classes) for a, b in folds.split(x, y)]
        scores.append(round(100 * float(np.mean(accuracies)), 2))
    best = int(np.argmax(scores))
    return PENALTIES[best], scores[best]


def inner_kfold_accuracy(config: ClassifierConfig, x: np.ndarray, y: np.ndarray, k: int) -> float:
    """Mean test accuracy x 100 over k stratified outer folds (MR, CR, SUBJ, MPQA)."""
    classes = _classes(y)
    outer = StratifiedKFold(n_splits=k, shuffle=True, random_state=SPLIT_SEED)
    inner = StratifiedKFold(n_splits=k, shuffle=True, random_state=SPLIT_SEED)
    accuracies = []
    for train, test in outer.split(x, y):
        penalty, _ = _best_penalty(config, x[train], y[train], inner, classes)
        model = Classifier(config, x.shape[1], classes, penalty)
        model.fit_holding_out(x[train], y[train])
        accuracies.append(round(100 * model.score(x[test], y[test]), 2))
    return round(float(np.mean(accuracies)), 2)


def kfold_accuracy(config: ClassifierConfig, train: tuple[np.ndarray, np.ndarray],
                   test: tuple[np.ndarray, np.ndarray], k: int) -> float:
    """Test accuracy x 100, the penalty chosen by k-fold on the training set (TREC, MRPC)."""
    classes = _classes(train[1], test[1])
    folds = StratifiedKFold(n_splits=k, shuffle=True, random_state=config.seed)
    penalty, _ = _best_penalty(config, *train, folds, classes)
    model = Classifier(config, train[0].shape[1], classes, penalty)
    model.fit_holding_out(*train)
    return round(100 * model.score(*test), 2)


def split_accuracy(config: ClassifierConfig, train: tuple[np.ndarray, np.ndarray], dev: tuple[np.ndarray, np.ndarray],
                   test: tuple[np.ndarray, np.ndarray], penalties: tuple[float, ...] = PENALTIES) -> float:
    """Test accuracy x 100, the penalty chosen on dev (SST2, SICK-E; SNLI with ``penalties=(1e-9,)``)."""
    classes = _classes(train[1], dev[1], test[1])
    scores = [round(100 * _train_score(config, p, train, dev, classes), 2) for p in penalties]
    model = Classifier(config, train[0].shape[1], classes, penalties[int(np.argmax(scores))])
    model.fit(*train, *dev)
    return round(100 * model.score(*test), 2)
