#!/usr/bin/env python3
"""Plot a `replayssm_bench kernels` result (and, optionally, peer results measured the same way).

    python3 bench/plot_kernels.py RESULTS.json OUT.png [--peer PEER.json ...]

One column per shape, over every family in the results (mamba2, gdn, kda; --family to pick).
Top: speedup vs batch of the ReplaySSM window (exact L-step amortisation)
and mixed-phase step over our conventional kernel (dispatcher route, main L); with --peer, also
the speedup of ours (window, mixed, conventional) over each peer. Middle: % of the copy bandwidth
per variant (each row's byte model over the copy ceiling of its own run). Bottom, when the
results hold an L sweep: window and mixed speedup vs L per sweep batch.
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Amortised replay speedup targets at batch 256 and 512: issue 3 (Mamba-2), issue 4 (GDN / KDA).
TARGET = {"mamba2": 1.85, "gdn": 1.75, "kda": 1.75}
TITLE = {"mamba2": "Mamba-2", "gdn": "Gated DeltaNet", "kda": "KDA"}


def load(path):
    with open(path) as f:
        doc = json.load(f)
    if doc.get("bench") != "kernels" or "rows" not in doc:
        sys.exit(f"plot_kernels: {path} is not a kernels result")
    return doc


def main_L(doc):
    L = doc.get("args", {}).get("L")
    if L is None:
        Ls = [r["L"] for r in doc["rows"] if r.get("L") is not None]
        L = max(set(Ls), key=Ls.count) if Ls else None
    return L


def series(rows, pred, key="us"):
    pts = sorted((r["batch"], r[key]) for r in rows if pred(r))
    return [b for b, _ in pts], [v for _, v in pts]


def replay(r, L, mode, h=None, route="auto"):
    return (r["variant"] == "replay" and r.get("L") == L and r.get("mode") == mode
            and r.get("route") == route and (h is None or r.get("h") == h))


def ratio(num, den):
    """Pointwise num / den over the batches both have."""
    d = dict(zip(*den))
    xs = [b for b in num[0] if b in d]
    return xs, [dict(zip(*num))[b] / d[b] for b in xs]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("out")
    ap.add_argument("--peer", action="append", default=[], help="peer JSON (repeatable)")
    ap.add_argument("--family", action="append", choices=sorted(TITLE),
                    help="families to plot (repeatable; default: all in the results)")
    args = ap.parse_args()

    doc = load(args.results)
    rows = doc["rows"]
    L = main_L(doc)
    peers = [load(p) for p in args.peer]
    families = args.family or list(TITLE)
    shapes = list(dict.fromkeys((r["family"], r["shape"]) for r in rows
                                if r["family"] in families))
    if not shapes or L is None:
        sys.exit(f"plot_kernels: no {'/'.join(families)} replay rows to plot")
    sweep = sorted({r["L"] for r in rows if r["variant"] == "replay"
                    and r.get("L") not in (None, L, 1)})
    nrows = 3 if sweep else 2
    fig, axes = plt.subplots(nrows, len(shapes), figsize=(6.5 * len(shapes), 4.2 * nrows),
                             squeeze=False)

    for col, (family, shape) in enumerate(shapes):
        rs = [r for r in rows if r["shape"] == shape and r["family"] == family]
        target = TARGET[family]
        conv = series(rs, lambda r: r["variant"] == "conventional")
        win = series(rs, lambda r: replay(r, L, "window"))
        mix = series(rs, lambda r: replay(r, L, "mixed"))
        disp = series(rs, lambda r: r.get("dispatched", False))

        ax = axes[0][col]
        ax.plot(*ratio(conv, win), "o-", label=f"window L={L} vs ours-conventional")
        ax.plot(*ratio(conv, mix), "s-", label=f"mixed L={L} vs ours-conventional")
        if disp[0]:
            ax.plot(*ratio(conv, disp), "D-", lw=2.5, alpha=0.6,
                    label="dispatched (L per batch, dispatch.h) vs ours-conventional")
        for p in peers:
            prs = [r for r in p["rows"] if r["shape"] == shape]
            for variant in sorted({r["variant"] for r in prs}):
                pv = series(prs, lambda r: r["variant"] == variant)
                ax.plot(*ratio(pv, win), "o--", label=f"window vs {variant}")
                ax.plot(*ratio(pv, mix), "s--", label=f"mixed vs {variant}")
                ax.plot(*ratio(pv, conv), "^:", label=f"ours-conventional vs {variant}")
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.axhline(target, color="gray", lw=0.8, ls=":", label=f"target {target}x (batch 256, 512)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch")
        ax.set_ylabel("speedup (×)")
        ax.set_title(f"{shape}: {TITLE[family]} decode speedup, state {rs[0]['state']}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)

        ax = axes[1][col]
        pct = lambda pred: series(rs, pred, "pct_copy_bw")  # noqa: E731
        ax.plot(*pct(lambda r: r["variant"] == "conventional"), "k^-", label="conventional")
        for mode, h, style in [("step", 1, "v-"), ("step", L - 2, "<-"), ("flush", L - 1, ">-"),
                               ("window", None, "o-"), ("mixed", None, "s-")]:
            name = f"{mode} h={h}" if mode == "step" else mode
            ax.plot(*pct(lambda r: replay(r, L, mode, h)), style, label=f"replay {name}")
        for p in peers:
            prs = [r for r in p["rows"] if r["shape"] == shape]
            for variant in sorted({r["variant"] for r in prs}):
                ax.plot(*series(prs, lambda r: r["variant"] == variant, "pct_copy_bw"), "x--",
                        label=variant)
        if family == "mamba2":
            ax.axhline(90, color="gray", lw=0.8, ls=":", label="90% (FlashInfer SSU, anchors)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch")
        ax.set_ylabel("% of copy bandwidth (byte model)")
        ax.set_title(f"{shape}: bandwidth per variant (copy {doc['copy_bandwidth_gbps']:.0f} GB/s)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)

        if sweep:
            ax = axes[2][col]
            convd = dict(zip(*conv))
            for batch in sorted({r["batch"] for r in rs if r.get("L") in sweep}):
                if batch not in convd:
                    continue
                for mode, style in [("window", "o-"), ("mixed", "s--")]:
                    pts = sorted((r["L"], convd[batch] / r["us"]) for r in rs
                                 if r["batch"] == batch and r.get("mode") == mode
                                 and r.get("route") == "auto")
                    ax.plot([x for x, _ in pts], [y for _, y in pts], style,
                            label=f"batch {batch} {mode}")
            ax.axhline(1.0, color="gray", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("ring length L")
            ax.set_ylabel("speedup over ours-conventional (×)")
            ax.set_title(f"{shape}: L sweep (dispatcher route)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)

    fig.suptitle(f"replayssm kernels on {doc['gpu']} — commit {str(doc['commit'])[:12]}, "
                 f"{doc['date']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=130)
    print(f"plot_kernels: wrote {args.out}")


if __name__ == "__main__":
    main()
