#!/usr/bin/env python3
"""Plot KL(reference || mode) vs position bucket per state mode from `replayssm eval --json` results.

    python3 scripts/plot_kl.py RESULTS.json [RESULTS.json ...] OUT.png

One panel per model (the files' "model"), one line per evaluated mode (state, ssm, L), log y axis:
the mean KL in nats of each position bucket (positions counted within each window). A mode whose
KL is exactly 0 everywhere (a configuration against itself) has no point on a log axis and is named
in the legend as "= 0". Without matplotlib the script says so and exits 0 without a plot (the JSON
is still checked).
"""
import argparse
import json
import sys


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"plot_kl: cannot read {path}: {e}")
    if doc.get("bench") != "kl" or not isinstance(doc.get("rows"), list):
        sys.exit(f"plot_kl: {path} is not a `replayssm eval` result (bench \"kl\")")
    return doc


def series(docs):
    """{model: {mode label: [(bucket_begin, bucket label, kl), ...] sorted by position}}."""
    out = {}
    for doc in docs:
        for r in doc["rows"]:
            if "kl" not in r or r.get("bucket") == "all":
                continue
            L = r.get("L")
            label = f"{r['state']} {r['variant']}" + (f" L={L}" if L is not None else "")
            pts = out.setdefault(r["model"], {}).setdefault(label, [])
            pts.append((r["bucket_begin"], r["bucket"], r["kl"]))
    for modes in out.values():
        for pts in modes.values():
            pts.sort()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="eval JSON files")
    ap.add_argument("out", help="output image (.png, .pdf, .svg)")
    args = ap.parse_args()
    data = series([load(p) for p in args.results])
    if not data:
        sys.exit("plot_kl: no KL rows in the results")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_kl: matplotlib is not installed (pip install matplotlib); no plot written",
              file=sys.stderr)
        return 0

    models = sorted(data)
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4.5), squeeze=False)
    for ax, model in zip(axes[0], models):
        buckets = sorted({(b, name) for pts in data[model].values() for b, name, _ in pts})
        x_of = {name: i for i, (_, name) in enumerate(buckets)}
        for label, pts in sorted(data[model].items()):
            xs = [x_of[name] for _, name, kl in pts if kl is not None and kl > 0]
            ys = [kl for _, _, kl in pts if kl is not None and kl > 0]
            if ys:
                ax.plot(xs, ys, marker="o", label=label)
            else:
                ax.plot([], [], linestyle="none", label=f"{label} (KL = 0)")
        ax.set_yscale("log")
        ax.set_xticks(range(len(buckets)), [name for _, name in buckets])
        ax.set_xlabel("position in window (bucket)")
        ax.set_ylabel("mean KL(reference || mode), nats")
        ax.set_title(model)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Teacher-forced KL vs conventional fp32 decoding")
    fig.tight_layout()
    fig.savefig(args.out, dpi=130)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
