"""How digit-like generated images are, judged by a trained digits classifier (docs/losses.md,
*DDPM on the digits*):

    lmc sample specs/ddpm_digits.yaml --init RUN --n 256 --npy samples.npy
    python benchmarks/sample_quality.py samples.npy --classifier runs/digits_cnn [--json]

The samples are unconditional, so there is no label to be right about; what is measured is
whether the classifier sees a digit in them and whether all ten digits come out:
- `histogram`: how many samples the classifier puts in each class (argmax);
- `confident`: the fraction whose top class has probability >= 0.9, and `mean_top_prob`;
- `classifier_score`: exp(E_x KL(p(y|x) || p(y))), the Inception Score with the digits classifier
  (1 to 10: 10 is every sample certain and the classes equally common);
- `marginal_entropy`: the entropy of the mean prediction p(y) in nats (ln 10 = 2.303 at best).
The same numbers on as many real validation digits are printed beside them (`real`), with the
classifier's top-1 accuracy on those, as the yardstick."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import lmc
from lmc.data import load_dataset


def scores(logits: np.ndarray, labels: np.ndarray | None = None) -> dict:
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    top = p.max(axis=1)
    marg = p.mean(axis=0)
    kl = np.sum(p * (np.log(p + 1e-12) - np.log(marg + 1e-12)), axis=1)
    out = {"n": int(len(p)), "histogram": np.bincount(p.argmax(axis=1), minlength=p.shape[1]).tolist(),
           "confident": float(np.mean(top >= 0.9)), "mean_top_prob": float(top.mean()),
           "classifier_score": float(np.exp(kl.mean())),
           "marginal_entropy": float(-np.sum(marg * np.log(marg + 1e-12)))}
    if labels is not None:
        out["top1"] = float(np.mean(p.argmax(axis=1) == labels))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("samples", type=Path, help="lmc sample --npy's array [n, 1, 8, 8] in [0, 1]")
    ap.add_argument("--classifier", required=True, help="a digits classifier's run directory (or checkpoint)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args(argv)
    x = np.load(a.samples)
    m = lmc.load(a.classifier)
    shape = tuple(m.net.input.dims[1:])
    got = scores(np.asarray(m.predict(x.reshape((len(x), *shape)))))
    val = load_dataset("digits", None, shape, 10)
    k = min(len(x), len(val.x_val))
    real = scores(np.asarray(m.predict(val.x_val[:k])), val.y_val[:k])
    if a.json:
        print(json.dumps({"samples": got, "real": real}))
        return 0
    for name, s in (("samples", got), (f"real ({k} validation digits)", real)):
        print(f"{name}: n {s['n']}, confident (p >= 0.9) {100 * s['confident']:.1f}%, mean top p "
              f"{s['mean_top_prob']:.3f}, classifier score {s['classifier_score']:.2f}/10, marginal entropy "
              f"{s['marginal_entropy']:.3f} nats" + (f", top-1 {100 * s['top1']:.1f}%" if "top1" in s else ""))
        print(f"  histogram 0-9: {s['histogram']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
