#!/usr/bin/env python3
"""Plot a `replayssm_bench verify` result.

    python3 bench/plot_verify.py RESULTS.json OUT.png

One column per shape. Top: verify latency relative to one ordinary ReplaySSM decode step vs T,
one line per (batch, acceptance), with the issue-5 targets (1.25x at T = 4, 1.5x at T = 8).
Bottom: speedup of ReplaySSM verify over the snapshot baseline vs T (targets 3x at T = 4,
4x at T = 8).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        doc = json.load(f)
    if doc.get("bench") != "verify" or "rows" not in doc:
        sys.exit(f"plot_verify: {sys.argv[1]} is not a verify result")
    rows = [r for r in doc["rows"] if r["variant"] == "replay"]
    shapes = sorted({r["shape"] for r in rows})
    fig, axes = plt.subplots(2, len(shapes), figsize=(6 * len(shapes), 8), squeeze=False)
    for c, shape in enumerate(shapes):
        mine = [r for r in rows if r["shape"] == shape]
        for batch in sorted({r["batch"] for r in mine}):
            for acc, style in (("all-accept", "-"), ("all-reject", "--")):
                pts = sorted((r["T"], r) for r in mine if r["batch"] == batch and r["acceptance"] == acc)
                if not pts:
                    continue
                Ts = [t for t, _ in pts]
                axes[0][c].plot(Ts, [r["ratio_to_decode_step"] for _, r in pts], style, marker="o",
                                label=f"batch {batch} {acc}")
                axes[1][c].plot(Ts, [r["speedup"] for _, r in pts], style, marker="o",
                                label=f"batch {batch} {acc}")
        axes[0][c].plot([4, 8], [1.25, 1.5], "k*", markersize=12, label="target (batch 256)")
        axes[1][c].plot([4, 8], [3.0, 4.0], "k*", markersize=12, label="target (batch 256)")
        axes[0][c].set_title(f"{shape}: verify / one decode step")
        axes[1][c].set_title(f"{shape}: snapshot baseline / ReplaySSM verify")
        for r in range(2):
            axes[r][c].set_xlabel("T (tokens per verify step)")
            axes[r][c].grid(alpha=0.3)
            axes[r][c].legend(fontsize=7)
        axes[0][c].set_ylabel("latency ratio (lower is better)")
        axes[1][c].set_ylabel("speedup (higher is better)")
    fig.suptitle(f"Speculative verify, {doc.get('gpu', '?')}, commit {doc.get('commit', '?')}")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
