#!/usr/bin/env python3
"""Peer benchmark: mamba_ssm's Triton selective_state_update (Mamba-2 decode step), measured with
the method of replayssm_bench kernels (DESIGN.md §4, anchors-h200.md "How it was measured"):

  * the same shapes and batches; fp32 state pool of R * batch slots addressed through int32 slot
    indices (call r owns its own run of a random permutation of the pool), R as replayssm_bench
    picks it (ceil(512 MiB / bytes of our smallest call), clamped to 2..64);
  * bf16 x, dt, B, C (and output), fp32 A, dt_bias, D; no z; dt_softplus; the "tie_hdim" decode
    path: A, dt, dt_bias, D broadcast over headdim (and d_state) as stride-0 views;
  * R calls captured in one CUDA graph (outputs kept alive, so each call writes its own buffer);
    2 eager passes (Triton JIT), 3 warm replays, 25 timed replays with an event between replays;
    µs per call = median replay / R (p10, p90 likewise);
  * copy ceiling of the same run: torch copy_ of a 4 GiB fp32 tensor, eager, events, read + write;
  * a correctness check first (batch 3, pooled slots, against an fp64 recurrence) and a finiteness
    check of every output and the pool after timing: any failure exits non-zero.

The peer's code is not part of this repository: --peer-path names the folder that holds its
`mamba_ssm/ops/triton/selective_state_update.py` (and softplus.py) in a package skeleton.
Writes rows with variant "mamba_ssm-triton" to --out (the JSON of DESIGN.md §4).
"""
import argparse
import datetime
import hashlib
import json
import math
import os
import sys
import time

import torch

SHAPES = {  # name: (nheads H, headdim P, d_state N, ngroups G), reference/models.md
    "nano-4b": (96, 80, 128, 8),
    "super-120b": (128, 64, 128, 8),
}
BATCHES = [1, 8, 32, 64, 128, 256, 512]
QUICK_BATCHES = [1, 64, 256]
VARIANT = "mamba_ssm-triton"


def fail(msg):
    print(f"mamba_ssm_ssu: error: {msg}", file=sys.stderr)
    sys.exit(1)


def plain_step_bytes(H, P, N, G):
    """Byte model of one conventional step per sequence (bench/byte_model.h): fp32 state read and
    written, bf16 x in and y out, one bf16 dt per head, bf16 B and C per group, int32 slot id."""
    return 2 * H * P * N * 4 + 2 * H * P * 2 + H * 2 + 2 * G * N * 2 + 4


def smallest_call_bytes(H, P, N, G):
    """Bytes per sequence of replayssm_bench's smallest call (a replay step with no history):
    fp32 checkpoint read, one ring record appended, inputs/outputs, slot id, cursors."""
    record = H * P * 2 + H * 4 + G * N * 2
    io = 2 * H * P * 2 + H * 2 + 2 * G * N * 2 + 4
    return H * P * N * 4 + record + io + 9


def calls_per_graph(H, P, N, G, batch):
    r = math.ceil(512 * 2**20 / (smallest_call_bytes(H, P, N, G) * batch))
    return max(2, min(64, r))


def percentile(samples, q):
    s = sorted(samples)
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (pos - lo) * (s[hi] - s[lo])


def copy_ceiling(nbytes, warm, timed):
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_(-1, 1)
    dst = torch.empty_like(src)
    for _ in range(warm):
        dst.copy_(src)
    torch.cuda.synchronize()
    ms = []
    for _ in range(timed):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        torch.cuda.synchronize()
        ms.append(a.elapsed_time(b))
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / (percentile(ms, 0.5) * 1e-3) / 1e9


class Layer:
    """Per-head parameters, drawn in the anchors' ranges, and their tie_hdim views."""

    def __init__(self, H, P, N, gen):
        dev = "cuda"
        self.A = torch.empty(H, device=dev).uniform_(-8, -1, generator=gen)
        self.dt_bias = torch.empty(H, device=dev).uniform_(0, 0.5, generator=gen)
        self.D = torch.empty(H, device=dev).uniform_(0.5, 1.5, generator=gen)
        self.A_v = self.A[:, None, None].expand(H, P, N)  # stride 0 over P and N
        self.dt_bias_v = self.dt_bias[:, None].expand(H, P)
        self.D_v = self.D[:, None].expand(H, P)


def make_inputs(n_calls, batch, H, P, N, G, gen):
    dev, bf16 = "cuda", torch.bfloat16
    x = torch.empty(n_calls, batch, H, P, device=dev).uniform_(-1, 1, generator=gen).to(bf16)
    dt = torch.empty(n_calls, batch, H, device=dev).uniform_(-3, -1, generator=gen).to(bf16)
    B = torch.empty(n_calls, batch, G, N, device=dev).uniform_(-1, 1, generator=gen).to(bf16)
    C = torch.empty(n_calls, batch, G, N, device=dev).uniform_(-1, 1, generator=gen).to(bf16)
    return x, dt, B, C


def call(ssu, layer, state, x, dt, B, C, ids):
    batch, H, P = x.shape
    return ssu(state, x, dt[:, :, None].expand(batch, H, P), layer.A_v, B, C, D=layer.D_v, z=None,
               dt_bias=layer.dt_bias_v, dt_softplus=True, state_batch_indices=ids)


def check_against_fp64(ssu, H, P, N, G, gen):
    """Batch 3 into a pool of 7 slots: y and the updated slots against an fp64 recurrence, the
    other slots untouched. Tolerances: y is stored in bf16 (relative rounding 2^-9 ~ 2e-3 per
    element, so 1e-2 on the relative L2 error leaves 5x margin); the state is fp32 arithmetic on a
    few terms, whose largest error is the fp32 softplus/exp of delta (a few ulp, ~1e-6 relative at
    worst; anchors-h200.md saw 5e-8..3e-7), checked at 1e-5."""
    layer = Layer(H, P, N, gen)
    pool = torch.empty(7, H, P, N, device="cuda").uniform_(-1, 1, generator=gen)
    before = pool.clone()
    ids = torch.tensor([5, 0, 3], dtype=torch.int32, device="cuda")
    x, dt, B, C = (t[0] for t in make_inputs(1, 3, H, P, N, G, gen))
    y = call(ssu, layer, pool, x, dt, B, C, ids)
    torch.cuda.synchronize()

    d = torch.float64
    s = before[ids.long()].to(d)
    delta = torch.nn.functional.softplus(dt.to(d) + layer.dt_bias.to(d))  # (b, H); all <= 20
    a = torch.exp(delta * layer.A.to(d))
    Bh = B.to(d).repeat_interleave(H // G, dim=1)  # (b, H, N)
    Ch = C.to(d).repeat_interleave(H // G, dim=1)
    s_new = s * a[:, :, None, None] + (delta[:, :, None] * x.to(d))[..., None] * Bh[:, :, None, :]
    y_ref = (s_new * Ch[:, :, None, :]).sum(-1) + layer.D.to(d)[None, :, None] * x.to(d)

    err_y = ((y.to(d) - y_ref).norm() / y_ref.norm()).item()
    err_s = ((pool[ids.long()].to(d) - s_new).norm() / s_new.norm()).item()
    others = [i for i in range(7) if i not in (5, 0, 3)]
    untouched = torch.equal(pool[others], before[others])
    print(f"check (H {H}, P {P}, N {N}, G {G}, batch 3, pooled): y rel err {err_y:.2e}, "
          f"state rel err {err_s:.2e}, other slots untouched: {untouched}", file=sys.stderr)
    if not (err_y < 1e-2 and err_s < 1e-5 and untouched):
        fail("the peer kernel does not match the fp64 recurrence (see the line above)")


def time_point(ssu, H, P, N, G, batch, timing, gen, perm_gen):
    R = calls_per_graph(H, P, N, G, batch)
    layer = Layer(H, P, N, gen)
    state = torch.empty(R * batch, H, P, N, device="cuda").uniform_(-1, 1, generator=gen)
    ids = torch.randperm(R * batch, generator=perm_gen).to(torch.int32).cuda().view(R, batch)
    x, dt, B, C = make_inputs(R, batch, H, P, N, G, gen)

    def run_all():
        return [call(ssu, layer, state, x[r], dt[r], B[r], C[r], ids[r]) for r in range(R)]

    for _ in range(timing["eager"]):
        run_all()
        torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = run_all()  # kept alive: every call writes its own output buffer
    for o in outs:
        o.fill_(float("nan"))
    for _ in range(timing["warm"]):
        graph.replay()
    torch.cuda.synchronize()
    n = timing["timed"]
    events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
    events[0].record()
    for i in range(n):
        graph.replay()
        events[i + 1].record()
    torch.cuda.synchronize()
    ms = [events[i].elapsed_time(events[i + 1]) for i in range(n)]
    finite = all(bool(torch.isfinite(o).all()) for o in outs) and bool(torch.isfinite(state).all())
    if not finite:
        fail(f"batch {batch}: non-finite outputs or state after timing")
    del graph, outs, state, x, dt, B, C, ids, layer
    torch.cuda.empty_cache()
    return R, ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer-path", required=True,
                    help="folder holding mamba_ssm/ops/triton/selective_state_update.py")
    ap.add_argument("--shapes", default="nano-4b,super-120b")
    ap.add_argument("--batch", default=None, help="comma-separated (default 1,8,32,64,128,256,512)")
    ap.add_argument("--out", default=None, help="write the results JSON here")
    ap.add_argument("--commit", default="unknown", help="commit recorded in the JSON")
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--replays", type=int, default=None, help="timed replays (default 25, quick 10)")
    ap.add_argument("--quick", action="store_true", help="batches 1,64,256 and 10 replays")
    args = ap.parse_args()

    shapes = args.shapes.split(",")
    for s in shapes:
        if s not in SHAPES:
            fail(f"--shapes {s}: expected one of {', '.join(SHAPES)}")
    if args.batch:
        batches = [int(b) for b in args.batch.split(",")]
    else:
        batches = QUICK_BATCHES if args.quick else BATCHES
    if any(b < 1 for b in batches):
        fail("--batch: every batch must be >= 1")
    timing = {"eager": 2, "warm": 3, "timed": 10 if args.quick else 25}
    if args.replays:
        timing["timed"] = args.replays

    peer_file = os.path.join(args.peer_path, "mamba_ssm", "ops", "triton",
                             "selective_state_update.py")
    if not os.path.isfile(peer_file):
        fail(f"--peer-path {args.peer_path}: no {peer_file}")
    if not torch.cuda.is_available():
        fail("no CUDA device")
    sys.path.insert(0, os.path.abspath(args.peer_path))
    from mamba_ssm.ops.triton.selective_state_update import selective_state_update as ssu
    import triton

    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    perm_gen = torch.Generator().manual_seed(args.seed + 1)
    gpu = torch.cuda.get_device_name()
    print(f"mamba_ssm_ssu: {gpu}, torch {torch.__version__}, triton {triton.__version__}, "
          f"seed {args.seed}", file=sys.stderr)
    copy_bytes = (1 << 30) if args.quick else (4 << 30)
    copy_gbps = copy_ceiling(copy_bytes, 2, 5 if args.quick else 10)
    print(f"copy ceiling (torch copy_, {copy_bytes >> 20} MiB, read + write): {copy_gbps:.0f} GB/s",
          file=sys.stderr)

    rows = []
    t0 = time.time()
    for name in shapes:
        H, P, N, G = SHAPES[name]
        check_against_fp64(ssu, H, P, N, G, gen)
        for batch in batches:
            R, ms = time_point(ssu, H, P, N, G, batch, timing, gen, perm_gen)
            per = 1e3 / R
            us = percentile(ms, 0.5) * per
            nbytes = plain_step_bytes(H, P, N, G) * batch
            gbps = nbytes / us / 1e3
            rows.append({
                "family": "mamba2", "shape": name, "batch": batch, "variant": VARIANT, "L": None,
                "state": "fp32/fp32", "us": us, "us_p10": percentile(ms, 0.1) * per,
                "us_p90": percentile(ms, 0.9) * per, "bytes": nbytes, "gbps": gbps,
                "pct_copy_bw": 100 * gbps / copy_gbps, "speedup": None, "baseline": None,
                "mode": None, "h": None, "route": None, "calls_per_graph": R, "steps_per_call": 1,
                "pool_slots": R * batch, "replays": timing["timed"],
            })
            print(f"{name} batch {batch} (R {R}): {us:.2f} us, {gbps:.0f} GB/s, "
                  f"{100 * gbps / copy_gbps:.0f}% copy", file=sys.stderr)
    secs = time.time() - t0

    if args.out:
        with open(peer_file, "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()
        doc = {
            "bench": "kernels", "commit": args.commit, "gpu": gpu,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "copy_bandwidth_gbps": copy_gbps,
            "copy": {"bytes_per_copy": copy_bytes, "torch_copy_gbps": copy_gbps,
                     "counted": "bytes read + bytes written, eager, median"},
            "peer": {"name": "mamba_ssm", "function": "selective_state_update (Triton)",
                     "file_sha256": sha, "torch": torch.__version__, "triton": triton.__version__},
            "method": {"calls_per_graph": "as replayssm_bench: ceil(512 MiB / bytes of a replay "
                                          "step with no history), 2..64",
                       "eager_passes": timing["eager"], "warm_replays": timing["warm"],
                       "timed_replays": timing["timed"], "us": "median graph replay time / R",
                       "inputs": "bf16 x, dt, B, C, y; fp32 A, dt_bias, D (tie_hdim, stride 0); "
                                 "no z; random slots"},
            "args": {"shapes": shapes, "batch": batches, "quick": args.quick, "seed": args.seed},
            "seconds": secs, "rows": rows,
        }
        d = os.path.dirname(args.out)
        if d:
            os.makedirs(d, exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        print(f"wrote {len(rows)} rows to {args.out} ({secs:.0f} s)", file=sys.stderr)

    print(f"\nmamba_ssm Triton selective_state_update, µs per call; copy ceiling {copy_gbps:.0f} GB/s")
    print(f"{'shape':<11} {'batch':>5} {'R':>3} | {'µs':>9} {'p10':>9} {'p90':>9} | {'GB/s':>6} {'%cp':>4}")
    for r in rows:
        print(f"{r['shape']:<11} {r['batch']:>5} {r['calls_per_graph']:>3} | {r['us']:>9.2f} "
              f"{r['us_p10']:>9.2f} {r['us_p90']:>9.2f} | {r['gbps']:>6.0f} {r['pct_copy_bw']:>4.0f}")


if __name__ == "__main__":
    main()
