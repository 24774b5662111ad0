#!/usr/bin/env python3
"""Plot KL(reference || mode) vs position bucket per state mode from `replayssm eval --json` results.

    python3 scripts/plot_kl.py RESULTS.json [RESULTS.json ...] OUT.png

One panel per model (the files' "model"), one line per evaluated mode (state, ssm, L), log y axis:
the mean KL in nats of each position bucket (positions counted within each window). A mode whose
KL is exactly 0 everywhere (a configuration against itself) has no point on a log axis and is named
in the legend as "= 0"; modes run emulated on CUDA ("emulated": true) are marked "*". An OUT
ending in .svg is written directly (no dependencies; split modes solid, shared baselines dashed,
one colour per read format, x = bucket start position); other formats need matplotlib: without it
the script says so and exits 0 without a plot (the JSON is still checked).
"""
import argparse
import json
import math
import sys

COLOURS = {"fp32": "#000000", "bf16": "#1f77b4", "fp16": "#2ca02c", "fp16sr": "#17becf",
           "fp8": "#ff7f0e", "nvfp4": "#d62728"}


def svg_colour(label):
    state = label.split(" ")[0]
    rec, _, read = state.replace("shared-", "").partition("/")
    read = read or rec
    base = COLOURS.get(read, "#7f7f7f")
    # the same read format with another recurrence: a darker shade
    if "/" in state and rec != "fp32" and rec != read:
        base = {"#d62728": "#8c1a1a" if rec == "fp8" else "#e377c2"}.get(base, base)
    return base


def write_svg(data, out_path, title):
    W, H, PL, PB, PT, PR, LEG = 430, 300, 64, 44, 30, 10, 190
    models = sorted(data)
    kls = [kl for m in data.values() for pts in m.values() for _, _, kl in pts if kl and kl > 0]
    lo = 10 ** math.floor(math.log10(min(kls))) if kls else 1e-8
    hi = 10 ** math.ceil(math.log10(max(kls))) if kls else 1.0
    hi = max(hi, lo * 10)
    width, height = len(models) * (W + LEG), H + 30
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
         f'font-family="sans-serif">', f'<rect width="{width}" height="{height}" fill="white"/>',
         f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="14">{title}</text>']
    for i, model in enumerate(models):
        x0, y0 = i * (W + LEG), 24
        begins = sorted({b for pts in data[model].values() for b, _, _ in pts})
        xmax = begins[-1] + (begins[-1] - begins[-2] if len(begins) > 1 else max(begins[-1], 1))

        def px(b):
            return x0 + PL + (W - PL - PR) * b / xmax

        def py(v):
            v = min(max(v, lo), hi)
            return y0 + PT + (H - PT - PB) * (math.log10(hi) - math.log10(v)) / (
                math.log10(hi) - math.log10(lo))

        o.append(f'<text x="{x0 + W / 2}" y="{y0 + 16}" text-anchor="middle" font-size="13">'
                 f'{model}</text>')
        o.append(f'<rect x="{x0 + PL}" y="{y0 + PT}" width="{W - PL - PR}" height="{H - PT - PB}" '
                 f'fill="none" stroke="#888"/>')
        for e in range(int(math.log10(lo)), int(math.log10(hi)) + 1):
            y = py(10.0 ** e)
            o.append(f'<line x1="{x0 + PL}" x2="{x0 + W - PR}" y1="{y}" y2="{y}" stroke="#eee"/>')
            o.append(f'<text x="{x0 + PL - 4}" y="{y + 4}" text-anchor="end" font-size="9">'
                     f'1e{e}</text>')
        ticks = 4
        for k in range(ticks + 1):
            b = xmax * k / ticks
            o.append(f'<text x="{px(b)}" y="{y0 + H - PB + 14}" text-anchor="middle" '
                     f'font-size="9">{int(b)}</text>')
        o.append(f'<text x="{x0 + PL + (W - PL - PR) / 2}" y="{y0 + H - 10}" text-anchor="middle" '
                 f'font-size="10">position in window (bucket start)</text>')
        o.append(f'<text x="{x0 + 14}" y="{y0 + PT + (H - PT - PB) / 2}" font-size="10" '
                 f'text-anchor="middle" transform="rotate(-90 {x0 + 14} '
                 f'{y0 + PT + (H - PT - PB) / 2})">mean KL(ref || mode), nats</text>')
        for j, (label, pts) in enumerate(sorted(data[model].items())):
            c = svg_colour(label)
            dash = ' stroke-dasharray="5,3"' if label.startswith("shared-") else ""
            p = [(px(b), py(kl)) for b, _, kl in pts if kl is not None and kl > 0]
            if len(p) > 1:
                o.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5"{dash} points="'
                         + " ".join(f"{x:.1f},{y:.1f}" for x, y in p) + '"/>')
            for x, y in p:
                o.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{c}"/>')
            ly = y0 + PT + 6 + 14 * j
            o.append(f'<line x1="{x0 + W + 4}" x2="{x0 + W + 24}" y1="{ly}" y2="{ly}" stroke="{c}" '
                     f'stroke-width="1.5"{dash}/>')
            name = label if p else f"{label} (KL = 0)"
            o.append(f'<text x="{x0 + W + 28}" y="{ly + 3}" font-size="9">{name}</text>')
    o.append("</svg>")
    with open(out_path, "w") as f:
        f.write("\n".join(o) + "\n")


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
            if r.get("emulated"):  # a CUDA run of a mode without kernels of its own
                label += " *"
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
    docs = [load(p) for p in args.results]
    data = series(docs)
    if not data:
        sys.exit("plot_kl: no KL rows in the results")
    title = "Teacher-forced KL vs conventional fp32 decoding"
    if any(r.get("emulated") for d in docs for r in d["rows"]):
        title += " (* emulated on CUDA: the mode's values over fp32 storage)"
    if args.out.endswith(".svg"):
        write_svg(data, args.out, title)
        print(f"wrote {args.out}")
        return 0
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_kl: matplotlib is not installed (pip install matplotlib); no plot written",
              file=sys.stderr)
        return 0

    models = sorted(data)
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 5.5), squeeze=False)
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
        ax.set_xticks(range(len(buckets)), [name for _, name in buckets], rotation=35, ha="right")
        ax.set_xlabel("position in window (bucket)")
        ax.set_ylabel("mean KL(reference || mode), nats")
        ax.set_title(model)
        ax.grid(True, which="both", alpha=0.3)
        # below the axes: the curves span the whole height (shared baselines on top, split modes low)
        ax.legend(fontsize=7.5, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.28))
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=130)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
