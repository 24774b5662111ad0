#!/usr/bin/env python3
"""Peer benchmark: FLA's Triton Gated DeltaNet / KDA decode kernels, as replayssm_bench kernels.

FLA = flash-linear-attention. Measured with the method of replayssm_bench kernels (DESIGN.md §4,
anchors-h200.md "How it was measured"), like peers/mamba_ssm_ssu.py:

  * our shapes and batches (qwen3.5-4b, qwen3.5-122b: GDN; kimi-linear: KDA); fp32 state pool of
    R * batch slots, R as replayssm_bench picks it (ceil(512 MiB / bytes of our smallest call, a
    replay step with no history), clamped to 2..64); call r owns its own inputs, outputs and slots;
  * our inputs: bf16 q, k, v, raw a (GDN [HV], KDA [HV, K]) and raw b, bf16 output; fp32 A_log,
    dt_bias (KDA [HV, K]); the kernels do the rest in-kernel (use_qk_l2norm_in_kernel,
    use_gate_in_kernel: g = -exp(A_log) softplus(a + dt_bias), use_beta_sigmoid_in_kernel), as ours;
  * R calls captured in one CUDA graph (outputs kept alive, so each call writes its own buffers);
    2 eager passes (Triton JIT), 3 warm replays, 25 timed replays with an event between replays;
    µs per call = median replay / R (p10, p90 likewise);
  * copy ceiling of the same run: torch copy_ of a 4 GiB fp32 tensor, eager, events, read + write;
  * a correctness check first (batch 3, pool of 7 slots, against an fp64 recurrence written here
    from DESIGN.md §2) and a finiteness check of every output and state after timing: any failure
    exits non-zero.

Variants (FLA 0.6.0; "-kv" marks FLA's default state layout [K, V], no suffix our [V, K]):
  gdn  fla-fused_recurrent-dense[-kv]: fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule.
       It has no slot indices: call r reads initial_state = the r-th block of `batch` consecutive
       pool slots and writes the final state to a NEW tensor (output_final_state=True): not the
       in-place pooled serving update.
  kda  fla-fused_recurrent_kda-pool[-kv]: fla.ops.kda.fused_recurrent.fused_recurrent_kda_fwd with
       ssm_state_indices (int32 slots of a random permutation of the pool) and
       inplace_final_state=True: the in-place pooled serving update (vLLM's KDA decode kernel).

The peer's code is not part of this repository: --peer-path names the folder holding the `fla`
package (the flash-linear-attention + fla-core wheels unpacked). The package __init__ files of
fla, fla.ops, fla.ops.gated_delta_rule and fla.ops.kda are bypassed (empty package modules), so
models, layers and the other ops (transformers, einops) are not imported; FLA's backend dispatch
is off (FLA_DISABLE_BACKEND_DISPATCH=1), so its Triton kernels run. Kernels are unmodified.
Pure-python dependencies missing from the image may be put in <peer-path>/_deps (appended to
sys.path, so the image's own copies win): FLA needs `packaging`.
Writes the JSON of DESIGN.md §4 to --out.
"""
import argparse
import datetime
import hashlib
import json
import math
import os
import re
import sys
import time
import types

import torch

SHAPES = {  # name: (family, H key heads, HV value heads, K, V), reference/models.md, gdn_kernels.cpp
    "qwen3.5-4b": ("gdn", 16, 32, 128, 128),
    "qwen3.5-122b": ("gdn", 16, 64, 128, 128),
    "kimi-linear": ("kda", 32, 32, 128, 128),
}
FAMILIES = ["gdn", "kda"]
BATCHES = [1, 8, 32, 64, 128, 256, 512]
QUICK_BATCHES = [1, 64, 256]
VARIANTS = {  # family: [(variant, state [V, K] (state_v_first), pooled in place via slot ids)]
    "gdn": [("fla-fused_recurrent-dense", True, False),
            ("fla-fused_recurrent-dense-kv", False, False)],
    "kda": [("fla-fused_recurrent_kda-pool", True, True),
            ("fla-fused_recurrent_kda-pool-kv", False, True)],
}
PEER_FILES = {"gdn": ("fla", "ops", "gated_delta_rule", "fused_recurrent.py"),
              "kda": ("fla", "ops", "kda", "fused_recurrent.py")}
CHECK_POOL, CHECK_IDS = 7, [5, 0, 3]
DEVICE = "cuda"  # the check alone also runs on "cpu" (TRITON_INTERPRET=1), for testing this file


def fail(msg):
    print(f"fla_gdn: error: {msg}", file=sys.stderr)
    sys.exit(1)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def gate_width(fam, K):
    return K if fam == "kda" else 1


def step_bytes(fam, H, HV, K, V):
    """bench/byte_model.h gdn_bytes with an fp32 state: (state, io, record) per sequence.
    io: q, k (H·K bf16 each), v and y (HV·V bf16 each), a (HV·gw bf16), b (HV bf16), int32 slot id.
    record: u (HV·V fp32), k^ (H·K fp32), g (HV·gw fp32)."""
    gw = gate_width(fam, K)
    state = HV * V * K * 4
    io = 2 * H * K * 2 + 2 * HV * V * 2 + HV * gw * 2 + HV * 2 + 4
    record = HV * V * 4 + H * K * 4 + HV * gw * 4
    return state, io, record


def conventional_bytes(fam, H, HV, K, V, pooled):
    """Read + write of the state rows touched, inputs and output (our conventional row's count);
    the dense variant has no slot id (4 bytes less)."""
    state, io, _ = step_bytes(fam, H, HV, K, V)
    return 2 * state + io - (0 if pooled else 4)


def calls_per_graph(fam, H, HV, K, V, batch):
    """As replayssm_bench (kernel_points.cpp): sized by an ordinary replay step with no history,
    S + one record + io + 9 cursor bytes per sequence."""
    state, io, record = step_bytes(fam, H, HV, K, V)
    r = math.ceil(512 * 2**20 / ((state + record + io + 9) * batch))
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


def import_fla(peer_path):
    """Imports the two decode entry points from peer_path without running the package __init__s
    (see the module doc). Returns (gdn function, kda function, FLA version)."""
    root = os.path.abspath(peer_path)
    init = os.path.join(root, "fla", "__init__.py")
    for parts in [("fla", "__init__.py")] + list(PEER_FILES.values()):
        f = os.path.join(root, *parts)
        if not os.path.isfile(f):
            fail(f"--peer-path {peer_path}: no {f}")
    m = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', open(init).read(), re.M)
    if not m:
        fail(f"no __version__ in {init}")
    version = m.group(1)
    os.environ["FLA_DISABLE_BACKEND_DISPATCH"] = "1"
    if any(n == "fla" or n.startswith("fla.") for n in sys.modules):
        fail("a module named fla is already imported")
    sys.path.insert(0, root)
    deps = os.path.join(root, "_deps")
    if os.path.isdir(deps):
        sys.path.append(deps)
    for name in ("fla", "fla.ops", "fla.ops.gated_delta_rule", "fla.ops.kda"):
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(root, *name.split("."))]
        pkg.__version__ = version
        sys.modules[name] = pkg
    from fla.ops.gated_delta_rule.fused_recurrent import fused_recurrent_gated_delta_rule
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd
    import fla.ops.gated_delta_rule.fused_recurrent as gdn_mod
    if not os.path.abspath(gdn_mod.__file__).startswith(root + os.sep):
        fail(f"fla was imported from {gdn_mod.__file__}, not from {root}")
    return fused_recurrent_gated_delta_rule, fused_recurrent_kda_fwd, version


class Data:
    """Layer parameters and the inputs of n_calls calls of `batch` sequences (T = 1), in our
    bench's ranges (gdn_pool.cpp): A_log ∈ [-1.5, 0.5], dt_bias ∈ [-1, 1], q, k, v, a ∈ [-1, 1],
    b ∈ [-2, 2]."""

    def __init__(self, shape, n_calls, batch, gen):
        fam, H, HV, K, V = SHAPES[shape]
        dev, bf16 = DEVICE, torch.bfloat16

        def u(size, lo, hi, dtype=bf16):
            return torch.empty(size, device=dev).uniform_(lo, hi, generator=gen).to(dtype)

        gate = (HV, K) if fam == "kda" else (HV,)
        self.A_log = u((HV,), -1.5, 0.5, torch.float32)
        self.dt_bias = u(gate, -1.0, 1.0, torch.float32)
        self.q = u((n_calls, batch, 1, H, K), -1, 1)
        self.k = u((n_calls, batch, 1, H, K), -1, 1)
        self.v = u((n_calls, batch, 1, HV, V), -1, 1)
        self.a = u((n_calls, batch, 1) + gate, -1, 1)
        self.b = u((n_calls, batch, 1, HV), -2, 2)
        self.scale = K ** -0.5


def call_dense(fn, d, r, h0, vk):
    """GDN: one decode step of `batch` sequences from initial states h0 [batch, HV, ., .];
    returns (o [batch, 1, HV, V], final state, a new tensor)."""
    return fn(q=d.q[r], k=d.k[r], v=d.v[r], g=d.a[r], beta=d.b[r], scale=d.scale,
              initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True,
              use_gate_in_kernel=True, A_log=d.A_log, dt_bias=d.dt_bias,
              use_beta_sigmoid_in_kernel=True, state_v_first=vk)


def call_pool(fn, d, r, pool, ids, out, vk):
    """KDA: one decode step of `batch` sequences, state rows pool[ids] updated in place; the
    output goes to out [batch, 1, HV, V] (given, so no zero-fill kernel is launched)."""
    return fn(q=d.q[r], k=d.k[r], v=d.v[r], g=d.a[r], beta=d.b[r], A_log=d.A_log,
              dt_bias=d.dt_bias, initial_state=pool, scale=d.scale, output_final_state=False,
              inplace_final_state=True, state_v_first=vk, ssm_state_indices=ids,
              use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
              use_beta_sigmoid_in_kernel=True, out=out)


def reference_step(S, q, k, v, a, b, A_log, dt_bias, fam):
    """fp64 GDN/KDA step (DESIGN.md §2) for n sequences: S [n, HV, V, K]; q, k [n, H, K];
    v [n, HV, V]; a [n, HV] (KDA [n, HV, K]); b [n, HV]. l2norm as FLA's kernels compute it,
    x / sqrt(sum x² + 1e-6). Returns (y [n, HV, V], new S)."""
    d = torch.float64
    S, q, k, v, a, b = (t.to(d) for t in (S, q, k, v, a, b))
    A_log, dt_bias = A_log.to(d), dt_bias.to(d)
    K, rep = q.shape[-1], v.shape[1] // q.shape[1]

    def l2norm(x):
        return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)

    qh = (l2norm(q) * K ** -0.5).repeat_interleave(rep, dim=1)  # [n, HV, K]
    kh = l2norm(k).repeat_interleave(rep, dim=1)
    if fam == "kda":
        g = -torch.exp(A_log)[None, :, None] * torch.nn.functional.softplus(a + dt_bias[None])
        alpha = torch.exp(g)[:, :, None, :]  # per key channel: scales the columns of [V, K]
    else:
        g = -torch.exp(A_log)[None, :] * torch.nn.functional.softplus(a + dt_bias[None])
        alpha = torch.exp(g)[:, :, None, None]
    beta = torch.sigmoid(b)
    S = alpha * S
    u = beta[..., None] * (v - (S * kh[:, :, None, :]).sum(-1))
    S = S + u[..., None] * kh[:, :, None, :]
    y = (S * qh[:, :, None, :]).sum(-1)
    return y, S


def check_against_fp64(fns, shape, variant, vk, pooled, gen):
    """Batch 3 from slots 5, 0, 3 of a pool of 7: y and the new states against the fp64 step;
    pooled: the other slots untouched; dense: the initial states and the pool untouched.
    Tolerances: y is stored in bf16 (relative rounding 2^-9 ~ 2e-3 per element, so 1e-2 on the
    relative L2 error leaves 5x margin); the state is fp32 arithmetic over K = 128 terms with
    approximate exp/softplus (~1e-6 relative at worst; anchors-h200.md saw 5e-8..3e-7), checked
    at 1e-5."""
    fam, H, HV, K, V = SHAPES[shape]
    n = len(CHECK_IDS)
    d = Data(shape, 1, n, gen)
    pool_vk = torch.empty(CHECK_POOL, HV, V, K, device=DEVICE).uniform_(-1, 1, generator=gen)
    pool = pool_vk if vk else pool_vk.transpose(-1, -2).contiguous()
    before = pool.clone()
    ids = torch.tensor(CHECK_IDS, dtype=torch.int32, device=DEVICE)
    idl = ids.long()
    if pooled:
        y = torch.full((n, 1, HV, V), float("nan"), dtype=torch.bfloat16, device=DEVICE)
        call_pool(fns["kda"], d, 0, pool, ids, y, vk)
        s_new = pool[idl]
        others = [i for i in range(CHECK_POOL) if i not in CHECK_IDS]
        untouched = torch.equal(pool[others], before[others])
    else:
        h0 = pool[idl].contiguous()
        h0_before = h0.clone()
        y, s_new = call_dense(fns["gdn"], d, 0, h0, vk)
        untouched = torch.equal(h0, h0_before) and torch.equal(pool, before)
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    sdims = (HV, V, K) if vk else (HV, K, V)
    if tuple(y.shape) != (n, 1, HV, V) or tuple(s_new.shape) != (n,) + sdims:
        fail(f"{shape} {variant}: output {tuple(y.shape)} / state {tuple(s_new.shape)}, expected "
             f"{(n, 1, HV, V)} / {(n,) + sdims}")
    if s_new.dtype != torch.float32 or y.dtype != torch.bfloat16:
        fail(f"{shape} {variant}: state {s_new.dtype} / output {y.dtype}, expected fp32 / bf16")
    s_got = s_new if vk else s_new.transpose(-1, -2)
    s0 = before if vk else before.transpose(-1, -2)  # [pool, HV, V, K], as before the call
    y_ref, s_ref = reference_step(s0[idl], d.q[0, :, 0], d.k[0, :, 0], d.v[0, :, 0],
                                  d.a[0, :, 0], d.b[0, :, 0], d.A_log, d.dt_bias, fam)
    f64 = torch.float64
    err_y = ((y[:, 0].to(f64) - y_ref).norm() / y_ref.norm()).item()
    err_s = ((s_got.to(f64) - s_ref).norm() / s_ref.norm()).item()
    what = "other slots" if pooled else "initial states"
    log(f"check {shape} {variant} (batch {n}, {'pooled, in place' if pooled else 'dense'}): "
        f"y rel err {err_y:.2e}, state rel err {err_s:.2e}, {what} untouched: {untouched}")
    if not (err_y < 1e-2 and err_s < 1e-5 and untouched):  # NaN fails both comparisons
        fail(f"{shape} {variant}: the peer kernel does not match the fp64 recurrence "
             "(see the line above)")


def time_point(fns, shape, variant, vk, pooled, batch, timing, gen, perm_gen):
    fam, H, HV, K, V = SHAPES[shape]
    R = calls_per_graph(fam, H, HV, K, V, batch)
    d = Data(shape, R, batch, gen)
    sdims = (HV, V, K) if vk else (HV, K, V)
    pool = torch.empty((R * batch,) + sdims, device="cuda").uniform_(-1, 1, generator=gen)
    if pooled:
        ids = torch.randperm(R * batch, generator=perm_gen).to(torch.int32).cuda().view(R, batch)
        ys = torch.empty(R, batch, 1, HV, V, dtype=torch.bfloat16, device="cuda")

        def run_all():
            for r in range(R):
                call_pool(fns["kda"], d, r, pool, ids[r], ys[r], vk)
            return [ys]
    else:
        blocks = pool.view((R, batch) + sdims)  # call r: consecutive slots r*batch ..

        def run_all():
            outs = []
            for r in range(R):
                outs.extend(call_dense(fns["gdn"], d, r, blocks[r], vk))
            return outs

    for _ in range(timing["eager"]):
        run_all()
        torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = run_all()  # kept alive: every call writes its own output (and final-state) buffer
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
    finite = all(bool(torch.isfinite(o).all()) for o in outs) and bool(torch.isfinite(pool).all())
    if not finite:
        fail(f"{shape} {variant} batch {batch}: non-finite outputs or state after timing")
    del graph, outs, pool, d
    torch.cuda.empty_cache()
    return R, ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer-path", required=True,
                    help="folder holding the fla package (fla/ops/gated_delta_rule/fused_recurrent.py)")
    ap.add_argument("--family", default="all", choices=FAMILIES + ["all"])
    ap.add_argument("--shapes", default=None,
                    help="comma-separated (default: every shape of the family: gdn qwen3.5-4b,"
                         "qwen3.5-122b; kda kimi-linear)")
    ap.add_argument("--batch", default=None, help="comma-separated (default 1,8,32,64,128,256,512)")
    ap.add_argument("--out", default=None, help="write the results JSON here")
    ap.add_argument("--commit", default="unknown", help="commit recorded in the JSON")
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--replays", type=int, default=None, help="timed replays (default 25, quick 10)")
    ap.add_argument("--quick", action="store_true", help="batches 1,64,256 and 10 replays")
    args = ap.parse_args()

    families = FAMILIES if args.family == "all" else [args.family]
    if args.shapes:
        shapes = args.shapes.split(",")
        for s in shapes:
            if s not in SHAPES:
                fail(f"--shapes {s}: expected one of {', '.join(SHAPES)}")
            if SHAPES[s][0] not in families:
                fail(f"--shapes {s} is a {SHAPES[s][0]} shape, not of --family {args.family}")
    else:
        shapes = [s for s in SHAPES if SHAPES[s][0] in families]
    if args.batch:
        try:
            batches = [int(b) for b in args.batch.split(",")]
        except ValueError:
            fail(f"--batch {args.batch}: expected comma-separated integers")
    else:
        batches = QUICK_BATCHES if args.quick else BATCHES
    if any(b < 1 for b in batches):
        fail("--batch: every batch must be >= 1")
    timing = {"eager": 2, "warm": 3, "timed": 10 if args.quick else 25}
    if args.replays:
        timing["timed"] = args.replays
    if timing["timed"] < 1:
        fail("--replays must be >= 1")

    root = os.path.abspath(args.peer_path)
    if not torch.cuda.is_available():
        fail("no CUDA device")
    gdn_fn, kda_fn, version = import_fla(args.peer_path)
    fns = {"gdn": gdn_fn, "kda": kda_fn}
    import triton

    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    perm_gen = torch.Generator().manual_seed(args.seed + 1)
    gpu = torch.cuda.get_device_name()
    log(f"fla_gdn: {gpu}, torch {torch.__version__}, triton {triton.__version__}, "
        f"fla {version}, seed {args.seed}")
    copy_bytes = (1 << 30) if args.quick else (4 << 30)
    copy_gbps = copy_ceiling(copy_bytes, 2, 5 if args.quick else 10)
    log(f"copy ceiling (torch copy_, {copy_bytes >> 20} MiB, read + write): {copy_gbps:.0f} GB/s")

    rows = []
    t0 = time.time()
    with torch.no_grad():
        for name in shapes:
            fam, H, HV, K, V = SHAPES[name]
            for variant, vk, pooled in VARIANTS[fam]:
                check_against_fp64(fns, name, variant, vk, pooled, gen)
            for batch in batches:
                for variant, vk, pooled in VARIANTS[fam]:
                    R, ms = time_point(fns, name, variant, vk, pooled, batch, timing, gen,
                                       perm_gen)
                    per = 1e3 / R
                    us = percentile(ms, 0.5) * per
                    nbytes = conventional_bytes(fam, H, HV, K, V, pooled) * batch
                    gbps = nbytes / us / 1e3
                    rows.append({
                        "family": fam, "shape": name, "batch": batch, "variant": variant,
                        "L": None, "state": "fp32/fp32", "us": us,
                        "us_p10": percentile(ms, 0.1) * per, "us_p90": percentile(ms, 0.9) * per,
                        "bytes": nbytes, "gbps": gbps, "pct_copy_bw": 100 * gbps / copy_gbps,
                        "speedup": None, "baseline": None, "mode": None, "h": None,
                        "route": None, "calls_per_graph": R, "steps_per_call": 1,
                        "pool_slots": R * batch, "replays": timing["timed"],
                        "state_layout": "[V,K]" if vk else "[K,V]", "state_in_place": pooled,
                        "slot_indices": pooled,
                    })
                    log(f"{name} {variant} batch {batch} (R {R}): {us:.2f} us, {gbps:.0f} GB/s, "
                        f"{100 * gbps / copy_gbps:.0f}% copy")
    secs = time.time() - t0

    if args.out:
        sha = {}
        for fam in families:
            with open(os.path.join(root, *PEER_FILES[fam]), "rb") as f:
                sha["/".join(PEER_FILES[fam])] = hashlib.sha256(f.read()).hexdigest()
        functions = {
            "gdn": "fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule(q, k, v, g=raw a, "
                   "beta=raw b, scale=K^-1/2, initial_state=[batch,HV,V,K] or [batch,HV,K,V], "
                   "output_final_state=True, use_qk_l2norm_in_kernel=True, "
                   "use_gate_in_kernel=True, A_log, dt_bias, use_beta_sigmoid_in_kernel=True, "
                   "state_v_first): dense, final state to a new tensor",
            "kda": "fla.ops.kda.fused_recurrent.fused_recurrent_kda_fwd(q, k, v, g=raw a [HV,K], "
                   "beta=raw b, A_log, dt_bias [HV,K], initial_state=pool, scale=K^-1/2, "
                   "output_final_state=False, inplace_final_state=True, state_v_first, "
                   "ssm_state_indices=int32 slots, use_qk_l2norm_in_kernel=True, "
                   "use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, out=given): "
                   "pooled, in place",
        }
        doc = {
            "bench": "kernels", "commit": args.commit, "gpu": gpu,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "copy_bandwidth_gbps": copy_gbps,
            "copy": {"bytes_per_copy": copy_bytes, "torch_copy_gbps": copy_gbps,
                     "counted": "bytes read + bytes written, eager, median"},
            "peer": {"name": "fla", "version": version,
                     "functions": {f: functions[f] for f in families},
                     "files_sha256": sha, "torch": torch.__version__,
                     "triton": triton.__version__,
                     "notes": "package __init__s bypassed, FLA_DISABLE_BACKEND_DISPATCH=1, "
                              "kernels unmodified"},
            "method": {"calls_per_graph": "as replayssm_bench: ceil(512 MiB / bytes of a replay "
                                          "step with no history), 2..64",
                       "eager_passes": timing["eager"], "warm_replays": timing["warm"],
                       "timed_replays": timing["timed"], "us": "median graph replay time / R",
                       "inputs": "bf16 q, k, v, raw a (gdn [HV], kda [HV,K]), raw b, y; fp32 "
                                 "A_log, dt_bias (kda [HV,K]); l2norm, gate and sigmoid in the "
                                 "kernel; fp32 state",
                       "slots": "pool variants: a random permutation of R*batch slots; dense "
                                "variants: call r reads slots r*batch..(r+1)*batch-1 and writes "
                                "a new final-state tensor",
                       "bytes": "2 * fp32 state + q, k, v, a, b, y (+ 4-byte slot id when "
                                "pooled): bench/byte_model.h conventional()"},
            "args": {"family": args.family, "shapes": shapes, "batch": batches,
                     "quick": args.quick, "seed": args.seed},
            "seconds": secs, "rows": rows,
        }
        d = os.path.dirname(args.out)
        if d:
            os.makedirs(d, exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        log(f"wrote {len(rows)} rows to {args.out} ({secs:.0f} s)")

    print(f"\nFLA {version} fused_recurrent decode, µs per call; copy ceiling {copy_gbps:.0f} GB/s")
    print(f"{'shape':<13} {'variant':<32} {'batch':>5} {'R':>3} | {'µs':>9} {'p10':>9} {'p90':>9} "
          f"| {'GB/s':>6} {'%cp':>4}")
    for r in rows:
        print(f"{r['shape']:<13} {r['variant']:<32} {r['batch']:>5} {r['calls_per_graph']:>3} | "
              f"{r['us']:>9.2f} {r['us_p10']:>9.2f} {r['us_p90']:>9.2f} | {r['gbps']:>6.0f} "
              f"{r['pct_copy_bw']:>4.0f}")


if __name__ == "__main__":
    main()
