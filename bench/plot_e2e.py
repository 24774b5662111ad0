#!/usr/bin/env python3
"""Plot `replayssm bench e2e` results (one JSON per architecture).

    python3 bench/plot_e2e.py RESULTS.json [RESULTS.json ...] OUT.png

One column per result. Top: decode-step speedup over conventional decoding vs batch, one line
per replay variant (L, state), the dispatcher's pick circled, with the issue-9 targets (batch 256:
1.45x Nemotron-3-Nano-4B, 1.25x Qwen3.5-4B; batch 1: 0.98x). Bottom: tokens/s vs batch per
variant, and the SSM layers' share of the conventional step (right axis).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TARGET_256 = {"nemotron-3-nano-4b": 1.45, "qwen3.5-4b": 1.25}


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"plot_e2e: {path}: {e}")
    if doc.get("bench") != "e2e" or not doc.get("rows"):
        sys.exit(f"plot_e2e: {path} is not a bench e2e result")
    return doc


def label(r):
    if r["variant"] == "conventional":
        return "conventional (again)" if r.get("repeat") else "conventional"
    s = f"replay L{r['L']}"
    return s if r["state"] == "fp32/fp32" else f"{s} {r['state']}"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    docs = [load(p) for p in sys.argv[1:-1]]
    fig, axes = plt.subplots(2, len(docs), figsize=(6.5 * len(docs), 8.5), squeeze=False)
    for c, doc in enumerate(docs):
        rows = doc["rows"]
        variants = []
        for r in rows:
            if label(r) not in variants:
                variants.append(label(r))
        top, bottom = axes[0][c], axes[1][c]
        for v in variants:
            pts = sorted((r["batch"], r) for r in rows if label(r) == v)
            bs = [b for b, _ in pts]
            style = "k--" if v == "conventional" else "k:" if v.startswith("conventional") else "-"
            top.plot(bs, [r["speedup"] for _, r in pts], style, marker="o", label=v)
            bottom.plot(bs, [r["tokens_per_s"] for _, r in pts], style, marker="o", label=v)
            picked = [(b, r["speedup"]) for b, r in pts
                      if r.get("dispatched") and r["variant"] == "replay"]
            if picked:
                top.plot(*zip(*picked), "o", markersize=13, markerfacecolor="none",
                         markeredgecolor="gray")
        arch = doc.get("arch", "?")
        if arch in TARGET_256:
            top.plot([256, 1], [TARGET_256[arch], 0.98], "k*", markersize=12, label="target")
        top.axhline(1.0, color="gray", linewidth=0.8)
        conv = sorted((r["batch"], r["ssm_share"]) for r in rows
                      if r["variant"] == "conventional" and not r.get("repeat"))
        share = bottom.twinx()
        share.plot(*zip(*conv), ":", color="tab:gray", marker="x", label="SSM share (conventional)")
        share.set_ylim(0, 1)
        share.set_ylabel("SSM layers' share of the conventional step")
        share.legend(loc="lower right", fontsize=7)
        top.set_title(f"{arch} ({doc.get('weights')} weights), context {doc.get('context')}: "
                      "speedup (circled: dispatcher)", fontsize=9)
        bottom.set_title(f"{arch}: decode throughput", fontsize=9)
        top.set_ylabel("step time: conventional / variant")
        bottom.set_ylabel("tokens/s")
        bottom.set_yscale("log")
        for ax in (top, bottom):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("batch")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="upper left")
    gpu = docs[0].get("gpu") or docs[0].get("cpu", "?")
    fig.suptitle(f"End-to-end decode steps, {gpu}, commit {docs[0].get('commit', '?')[:10]}")
    fig.tight_layout()
    try:
        fig.savefig(sys.argv[-1], dpi=110)
    except (OSError, ValueError) as e:
        sys.exit(f"plot_e2e: cannot write {sys.argv[-1]}: {e}")


if __name__ == "__main__":
    main()
