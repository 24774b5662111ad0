#!/usr/bin/env python3
"""Plot a `replayssm bench spec` result.

    python3 bench/plot_spec.py RESULTS.json OUT.png

One column per T. Top: committed tokens/s vs batch for standard decoding, snapshot speculative
decoding and ReplaySSM speculative decoding. Bottom: ReplaySSM's speedup over the snapshot
baseline and over standard decoding, with the issue-9 targets at batch 512 (1.8x over snapshot,
1.7x over standard, T = 4).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    try:
        with open(sys.argv[1]) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"plot_spec: {sys.argv[1]}: {e}")
    if doc.get("bench") != "spec" or not doc.get("rows"):
        sys.exit(f"plot_spec: {sys.argv[1]} is not a bench spec result")
    # Points the device could not hold carry null measurements ("fits_device": false): gaps.
    rows = [{k: (float("nan") if v is None and k in ("tokens_per_s", "speedup",
                                                      "speedup_vs_snapshot", "mean_accepted")
                 else v) for k, v in r.items()} for r in doc["rows"]]
    Ts = sorted({r["T"] for r in rows if r["variant"] != "standard"})
    fig, axes = plt.subplots(2, len(Ts), figsize=(6 * len(Ts), 8), squeeze=False)
    standard = sorted((r["batch"], r["tokens_per_s"]) for r in rows if r["variant"] == "standard")
    for c, T in enumerate(Ts):
        top, bottom = axes[0][c], axes[1][c]
        top.plot(*zip(*standard), "k--", marker="o", label="standard")
        for v in ("snapshot", "replay"):
            pts = sorted((r["batch"], r) for r in rows if r["variant"] == v and r["T"] == T)
            top.plot([b for b, _ in pts], [r["tokens_per_s"] for _, r in pts], marker="o",
                     label=f"{v} speculative")
        rep = sorted((r["batch"], r) for r in rows if r["variant"] == "replay" and r["T"] == T)
        bottom.plot([b for b, _ in rep], [r["speedup_vs_snapshot"] for _, r in rep], marker="o",
                    label="ReplaySSM / snapshot")
        bottom.plot([b for b, _ in rep], [r["speedup"] for _, r in rep], marker="o",
                    label="ReplaySSM / standard")
        if T == 4 and not doc.get("drafter"):  # issue 9's targets are for the trace runs
            bottom.plot([512, 512], [1.8, 1.7], "k*", markersize=12, label="targets (batch 512)")
        bottom.axhline(1.0, color="gray", linewidth=0.8)
        means = [r["mean_accepted"] for _, r in rep if r["mean_accepted"] == r["mean_accepted"]]
        mean = means[-1] if means else 0
        how = (f"drafter {doc['drafter']}" if doc.get("drafter")
               else f"{doc.get('alpha')} per draft")
        top.set_title(f"T = {T}: committed tokens/s ({how}, "
                      f"{mean:.2f} tokens per row-step)", fontsize=9)
        bottom.set_title(f"T = {T}: ReplaySSM speculative decoding speedup", fontsize=9)
        top.set_ylabel("tokens/s")
        top.set_yscale("log")
        bottom.set_ylabel("speedup")
        for ax in (top, bottom):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("batch")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    where = doc.get("gpu") or doc.get("cpu", "?")
    fig.suptitle(f"Speculative decoding, {rows[0].get('arch', '?')} ({doc.get('weights')} weights), "
                 f"{where}, commit {str(doc.get('commit', '?'))[:10]}")
    fig.tight_layout()
    try:
        fig.savefig(sys.argv[2], dpi=110)
    except (OSError, ValueError) as e:
        sys.exit(f"plot_spec: cannot write {sys.argv[2]}: {e}")


if __name__ == "__main__":
    main()
