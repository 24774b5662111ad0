#!/usr/bin/env python3
"""Plot the drift study (bench "precision", study "drift") as an SVG, without dependencies.

    python3 scripts/plot_drift.py RESULTS.json [RESULTS.json ...] OUT.svg

One column per family (mamba2, gdn, kda), two rows: output rel_error and state_rel_error against
the fp32 recurrence, vs decode step, both axes logarithmic; one line per state mode (split modes
solid, shared baselines dashed; the same colour for the same read precision). Several files (e.g.
a 10^4 run of every family and a 10^5 run of one) are drawn together; where a family and mode
appear twice the longer run wins. Zero errors (fp32 recurrence states equal to the reference bit
for bit) have no point on a log axis: they are drawn on the bottom edge and the legend says "= 0".
"""
import json
import math
import sys

COLOURS = {"fp32": "#000000", "bf16": "#1f77b4", "fp16": "#2ca02c", "fp16sr": "#17becf",
           "fp8": "#ff7f0e", "nvfp4": "#d62728"}
W, H, PAD_L, PAD_B, PAD_T, PAD_R = 360, 260, 62, 40, 28, 12
LO, HI = 1e-8, 1e1


def load(paths):
    rows = {}
    for p in paths:
        with open(p) as f:
            doc = json.load(f)
        if doc.get("bench") != "precision" or doc.get("study") != "drift":
            sys.exit(f"plot_drift: {p} is not a drift study result")
        for r in doc["rows"]:
            key = (r["family"], r["state"])
            if key not in rows or r["drift"][-1]["steps"] > rows[key]["drift"][-1]["steps"]:
                rows[key] = r
    return rows


def colour(state):
    read = state.split("/")[-1].replace("shared-", "")
    return COLOURS.get(read, "#7f7f7f")


def panel(out, x0, y0, title, series, max_step):
    def px(step):
        return x0 + PAD_L + (W - PAD_L - PAD_R) * math.log10(step) / math.log10(max_step)

    def py(v):
        v = min(max(v, LO), HI)
        return y0 + PAD_T + (H - PAD_T - PAD_B) * (math.log10(HI) - math.log10(v)) / (
            math.log10(HI) - math.log10(LO))

    out.append(f'<text x="{x0 + W / 2}" y="{y0 + 16}" text-anchor="middle" font-size="13">{title}</text>')
    out.append(f'<rect x="{x0 + PAD_L}" y="{y0 + PAD_T}" width="{W - PAD_L - PAD_R}" '
               f'height="{H - PAD_T - PAD_B}" fill="none" stroke="#888"/>')
    for e in range(int(math.log10(LO)), int(math.log10(HI)) + 1):
        y = py(10.0 ** e)
        out.append(f'<line x1="{x0 + PAD_L}" x2="{x0 + W - PAD_R}" y1="{y}" y2="{y}" stroke="#eee"/>')
        out.append(f'<text x="{x0 + PAD_L - 4}" y="{y + 4}" text-anchor="end" font-size="9">1e{e}</text>')
    for e in range(0, int(math.log10(max_step)) + 1):
        x = px(10.0 ** e)
        out.append(f'<line x1="{x}" x2="{x}" y1="{y0 + PAD_T}" y2="{y0 + H - PAD_B}" stroke="#eee"/>')
        out.append(f'<text x="{x}" y="{y0 + H - PAD_B + 12}" text-anchor="middle" font-size="9">1e{e}</text>')
    out.append(f'<text x="{x0 + PAD_L + (W - PAD_L) / 2}" y="{y0 + H - 8}" text-anchor="middle" '
               f'font-size="10">decode step</text>')
    for state, pts in series:
        dash = ' stroke-dasharray="5,3"' if state.startswith("shared-") else ""
        path = " ".join(f"{'M' if i == 0 else 'L'}{px(s):.1f},{py(v):.1f}" for i, (s, v) in enumerate(pts))
        out.append(f'<path d="{path}" fill="none" stroke="{colour(state)}" stroke-width="1.5"{dash}/>')


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    rows = load(argv[1:-1])
    families = [f for f in ("mamba2", "gdn", "kda") if any(k[0] == f for k in rows)]
    states = []
    for (_, s) in rows:
        if s not in states:
            states.append(s)
    max_step = max(r["drift"][-1]["steps"] for r in rows.values())
    legend_h = 18 * ((len(states) + 3) // 4) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W * len(families)}" '
           f'height="{2 * H + legend_h + 24}" font-family="sans-serif">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="8" y="16" font-size="13">relative error vs the fp32 recurrence '
           f'(solid: ReplaySSM split modes, dashed: shared baselines)</text>']
    zero = set()
    for col, fam in enumerate(families):
        for row, (metric, label) in enumerate((("rel_error", "output"), ("state_rel_error", "state"))):
            series = []
            for s in states:
                r = rows.get((fam, s))
                if not r:
                    continue
                pts = [(d["steps"], d[metric]) for d in r["drift"]]
                if all(v == 0 for _, v in pts):
                    zero.add((s, label))
                series.append((s, pts))
            shape = next(r["shape"] for k, r in rows.items() if k[0] == fam)
            panel(out, col * W, 24 + row * H, f"{fam} ({shape}): {label}", series, max_step)
    y = 24 + 2 * H + 8
    for i, s in enumerate(states):
        x, yy = 10 + (i % 4) * (W * len(families) - 20) / 4, y + 18 * (i // 4)
        dash = ' stroke-dasharray="5,3"' if s.startswith("shared-") else ""
        note = " (state = 0)" if (s, "state") in zero else ""
        out.append(f'<line x1="{x}" x2="{x + 24}" y1="{yy}" y2="{yy}" stroke="{colour(s)}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{x + 30}" y="{yy + 4}" font-size="11">{s}{note}</text>')
    out.append("</svg>")
    with open(argv[-1], "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv)
