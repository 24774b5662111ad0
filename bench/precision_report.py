#!/usr/bin/env python3
"""Issue 6 part 4 from `replayssm_bench kernels` runs of one call and family, one per state mode:

    python3 bench/precision_report.py OUT.json OUT.png RUN_fp32.json RUN_fp32-bf16.json ...

Every run must hold the mode's ReplaySSM rows at the same shapes and batches; the fp32/fp32 run
is the baseline. Writes DESIGN.md §4 JSON (bench "precision") with, per (shape, batch, mode):
the ordinary step's µs at h = 1 and h = L-2 and its "speedup" over the fp32-read ordinary step at
the same h ("baseline": "fp32-read ordinary step"); the L-step window and the mixed-phase step
with their speedups over the fp32 conventional step; and the state bytes per sequence per layer
of the mode (checkpoint + read copy, precision.h). The plot: ordinary-step and window speedup vs
batch per mode, one column per shape.
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Issue 6 targets at batch 256 (Nano-4B, Qwen3.5-4B): NVFP4 read >= 4x, 16-bit read >= 1.8x the
# fp32 read.
TARGET = {"fp32/nvfp4": 4.0, "fp32/bf16": 1.8, "fp32/fp16": 1.8}
TARGET_SHAPES = ("nano-4b", "qwen3.5-4b")
# A layer's state per sequence as (heads, rows, row length): Mamba-2 (H, P, N), GDN/KDA (HV, V, K).
DIMS = {
    "mamba2": {"nano-4b": (96, 80, 128), "super-120b": (128, 64, 128)},
    "gdn": {"qwen3.5-4b": (32, 128, 128), "qwen3.5-122b": (64, 128, 128)},
    "kda": {"kimi-linear": (32, 128, 128)},
}
TITLE = {"mamba2": "Mamba-2", "gdn": "Gated DeltaNet", "kda": "KDA"}


def state_bytes(state, H, P, N):
    """Checkpoint + read copy bytes of one sequence's layer state (precision.h): H heads of P rows
    of N elements; fp8 copies add a float32 scale per row, NVFP4 copies an E4M3 scale per 16
    elements and a float32 scale per head; the fp16sr modes a float16 checkpoint and its SR keys
    (fp16sr/fp16sr reads the checkpoint itself)."""
    e = H * P * N
    if state == "fp16sr/fp16sr":  # one float16 checkpoint, read as it is, and 12 B of SR keys
        return 2 * e + 12, 0
    recurrence, read = state.split("/")
    copy = {"fp32": 0, "bf16": 2 * e, "fp16": 2 * e, "fp8": e + 4 * H * P,
            "nvfp4": e // 2 + e // 16 + 4 * H}.get(read)
    if copy is None:
        sys.exit(f"precision_report: state {state!r}: read copy {read!r} is not benchmarked")
    if recurrence == "fp16sr":  # fp16sr/nvfp4: the float16 checkpoint, its SR keys, the copy
        return 2 * e + 12 + copy, copy
    return 4 * e + copy, copy


def fail(msg):
    sys.exit(f"precision_report: {msg}")


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    except json.JSONDecodeError as e:
        fail(f"{path}: not JSON ({e})")
    if (not isinstance(doc, dict) or doc.get("bench") != "kernels"
            or not isinstance(doc.get("rows"), list) or not isinstance(doc.get("args"), dict)
            or doc["args"].get("family") not in DIMS):
        fail(f"{path} is not a `replayssm_bench kernels --family mamba2|gdn|kda` result")
    dims = DIMS[doc["args"]["family"]]
    if not isinstance(doc["args"].get("L"), int):
        fail(f"{path}: args.L missing, expected the ring length of the main points")
    for r in doc["rows"]:
        if not isinstance(r, dict) or not all(k in r for k in ("shape", "batch", "us", "variant")):
            fail(f"{path}: a row without shape, batch, variant or us: {str(r)[:80]}")
    state = doc["args"].get("state")
    if state not in ("fp32", "fp16sr/fp16sr", "fp16sr/nvfp4") and (
            not isinstance(state, str) or not state.startswith("fp32/")):
        fail(f"{path}: state {state!r}, expected fp32, a split mode fp32/<read>, fp16sr/fp16sr "
             "or fp16sr/nvfp4")
    for r in doc["rows"]:
        if r.get("shape") not in dims:
            fail(f"{path}: shape {r.get('shape')!r} has no dimensions here (expected one of "
                 f"{', '.join(dims)})")
    return doc


def index(doc):
    """(shape, batch, mode, h) -> row of the dispatcher's route at the main L."""
    L = doc["args"]["L"]
    out = {}
    for r in doc["rows"]:
        if r.get("L") not in (None, L) or r.get("route") not in (None, "auto"):
            continue
        key = (r["shape"], r["batch"], r.get("mode") or r["variant"], r.get("h"))
        out.setdefault(key, r)
    return out, L


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_json")
    ap.add_argument("out_png")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    docs = [load(p) for p in a.runs]
    if len({d["args"]["family"] for d in docs}) != 1:
        fail("the runs differ in family: one family per report")
    family = docs[0]["args"]["family"]
    states = [d["args"]["state"] for d in docs]
    if len(set(states)) != len(states):
        fail(f"the runs repeat a state ({', '.join(states)}): one run per mode")
    for key in ("commit", "gpu"):
        if len({d.get(key) for d in docs}) != 1:
            fail(f"the runs differ in {key} ({', '.join(str(d.get(key)) for d in docs)}): "
                 "compare runs of one call")
    if len({d["args"].get("L") for d in docs}) != 1:
        fail("the runs differ in L: compare runs of one call")
    base = next((d for d in docs if d["args"]["state"] == "fp32"), None)
    if base is None:
        fail("one run must be --state fp32 (the fp32-read baseline)")
    bidx, L = index(base)
    rows = []
    for d in docs:
        state = d["args"]["state"]
        state = "fp32/fp32" if state == "fp32" else state
        idx, _ = index(d)
        for (shape, batch, mode, h), r in sorted(idx.items(), key=lambda kv: str(kv[0])):
            if mode in ("conventional", "flush"):
                continue
            conv = bidx.get((shape, batch, "conventional", None))
            ref = bidx.get((shape, batch, "step", h)) if mode == "step" else conv
            if ref is None:
                fail(f"the fp32 run has no {mode if mode == 'step' else 'conventional'} row at "
                     f"{shape} batch {batch}{f' h {h}' if h is not None else ''}: run the same "
                     "shapes and batches for every mode")
            H, P, N = DIMS[family][shape]
            total, copy = state_bytes(state, H, P, N)
            row = {"family": family, "shape": shape, "batch": batch, "variant": "replay",
                   "L": L, "state": state, "mode": mode, "h": h, "us": r["us"],
                   "gbps": r.get("gbps"), "pct_copy_bw": r.get("pct_copy_bw"),
                   "state_bytes_per_sequence": total, "read_copy_bytes": copy}
            row["speedup"] = ref["us"] / r["us"]
            row["baseline"] = "fp32-read ordinary step" if mode == "step" else "fp32 conventional step"
            rows.append(row)
    out = {"bench": "precision", "commit": base["commit"], "gpu": base["gpu"],
           "date": base["date"], "copy_bandwidth_gbps": base["copy_bandwidth_gbps"],
           "sources": a.runs, "rows": rows}
    if not any(r["state"] != "fp32/fp32" for r in rows):
        fail("no split-mode rows: pass the fp32 run and at least one fp32/<read> or fp16sr/* "
             "run")
    try:
        with open(a.out_json, "w") as f:
            json.dump(out, f, indent=2)
    except OSError as e:
        fail(f"{a.out_json}: {e.strerror}")

    shapes = sorted({r["shape"] for r in rows})
    states = [s for s in dict.fromkeys(r["state"] for r in rows) if s != "fp32/fp32"]
    fig, axes = plt.subplots(2, len(shapes), figsize=(6 * len(shapes), 8), squeeze=False)
    for c, shape in enumerate(shapes):
        for s in states:
            sel = [r for r in rows if r["shape"] == shape and r["state"] == s]
            step = sorted((r["batch"], r["speedup"]) for r in sel if r["mode"] == "step" and r["h"] == 1)
            win = sorted((r["batch"], r["speedup"]) for r in sel if r["mode"] == "window")
            if step:
                axes[0][c].plot(*zip(*step), marker="o", label=s)
            if win:
                axes[1][c].plot(*zip(*win), marker="o", label=s)
        for s, t in TARGET.items():
            if s in states and shape in TARGET_SHAPES:
                axes[0][c].axhline(t, ls=":", lw=0.8, color="grey")
        axes[0][c].set_title(f"{shape}: ordinary step (h = 1) vs fp32-read ordinary step")
        axes[1][c].set_title(f"{shape}: L = {L} window vs fp32 conventional step")
        for ax in (axes[0][c], axes[1][c]):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("batch")
            ax.set_ylabel("speedup (x)")
            ax.axhline(1.0, lw=0.8, color="black")
            ax.grid(alpha=0.3)
            ax.legend()
    fig.suptitle(f"{TITLE[family]} state modes, {base['gpu']}, commit {base['commit']}\n"
                 "(dotted: issue 6 targets)")
    fig.tight_layout()
    try:
        fig.savefig(a.out_png, dpi=110)
    except OSError as e:
        fail(f"{a.out_png}: {e.strerror}")


if __name__ == "__main__":
    main()
