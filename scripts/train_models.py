#!/usr/bin/env python3
"""Train the project's two small byte-level hybrid language models.

Two models, both built from the Hugging Face `transformers` model classes (no other model code, nothing
downloaded at run time), with a 256-entry byte vocabulary (token id = byte value; no tokenizer file):

  nemotron-h-tiny   NemotronHForCausalLM: Mamba-2 + attention (no RoPE) + squared-ReLU MLP blocks
  qwen3-next-tiny   Qwen3NextForCausalLM: Gated DeltaNet + gated full attention every 4th layer,
                    dense SwiGLU MLP in every layer (num_experts = 0)

and, on request (`--model nemotron-h-draft`, not part of `all`), a draft model for speculative
decoding: the nemotron-h-tiny architecture about 7x smaller (hidden 192, 5 blocks "M-M*-").

Data: the public-domain books in ../shared/data/books (or --data-dir); one whole book (--holdout,
default frankenstein.txt) is held out for evaluation and never trained on.

Training: sequence length 1024, AdamW, linear warm-up then cosine decay, bf16 autocast on CUDA. The
number of steps is fitted to a wall-clock budget (--time-budget) from the measured step time, unless
--steps is given. Each model's directory gets config.json + model.safetensors (bf16), curve.json,
curve.png (if matplotlib is present), samples.json and a model card README.md.

  python3 scripts/train_models.py --model all --data-dir ../shared/data/books --out models \
      --time-budget 300          # both models, two concurrent processes on one GPU
  python3 scripts/train_models.py --model nemotron-h-tiny --steps 3 --batch 2 --device cpu \
      --out /tmp/smoke            # CPU smoke test
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

MODELS = ("nemotron-h-tiny", "qwen3-next-tiny")
DRAFT = "nemotron-h-draft"  # trained on request only
VOCAB = 256
LN2 = math.log(2.0)


# --------------------------------------------------------------------------------------------------
# Model definitions


def nemotron_h_config(seq_len: int, draft: bool = False):
    from transformers import NemotronHConfig

    cfg = NemotronHConfig(
        vocab_size=VOCAB,
        hidden_size=192 if draft else 384,
        # M = Mamba-2, - = squared-ReLU MLP, * = attention (no positional encoding)
        hybrid_override_pattern="M-M*-" if draft else "M-M*M-M*M-",
        num_attention_heads=3 if draft else 6,
        num_key_value_heads=1 if draft else 2,
        head_dim=64,
        attention_bias=False,
        intermediate_size=512 if draft else 1024,
        mlp_hidden_act="relu2",
        mlp_bias=False,
        mamba_num_heads=4 if draft else 8,
        mamba_head_dim=64,
        ssm_state_size=64 if draft else 128,
        n_groups=1 if draft else 2,
        conv_kernel=4,
        expand=2,  # unused by the HF model: d_inner = mamba_num_heads * mamba_head_dim
        chunk_size=128,
        use_conv_bias=True,
        mamba_proj_bias=False,
        use_bias=False,
        # time_step_min is only used (a) to draw the initial dt_bias and (b) by HF's Nemotron-H mixer
        # as the *lower clamp* of dt in its chunked (prefill/training) path: the mixer hard-codes
        # dt_limit = (time_step_min, inf) and ignores time_step_limit. It is set to 0.0 after
        # initialisation (see build_model) so that every implementation agrees: no clamp at all.
        time_step_min=0.001,
        time_step_max=0.1,
        time_step_floor=1e-4,
        time_step_limit=(0.0, float("inf")),
        layer_norm_epsilon=1e-5,
        residual_in_fp32=False,
        tie_word_embeddings=False,
        max_position_embeddings=max(4096, seq_len),
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
        num_logits_to_keep=1,
    )
    return cfg


def qwen3_next_config(seq_len: int):
    from transformers import Qwen3NextConfig

    n_layers = 8
    cfg = Qwen3NextConfig(
        vocab_size=VOCAB,
        hidden_size=320,
        num_hidden_layers=n_layers,
        # 3 Gated DeltaNet layers then 1 gated full-attention layer, repeated
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(n_layers)],
        intermediate_size=640,
        hidden_act="silu",
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        attention_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        linear_conv_kernel_dim=4,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        # dense SwiGLU MLP in every layer: with num_experts = 0 no layer builds the sparse MoE block
        num_experts=0,
        num_experts_per_tok=1,
        decoder_sparse_step=1,
        mlp_only_layers=list(range(n_layers)),
        moe_intermediate_size=0,
        shared_expert_intermediate_size=0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        max_position_embeddings=max(4096, seq_len),
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
    )
    return cfg


def build_model(name: str, seq_len: int):
    from transformers import NemotronHForCausalLM, Qwen3NextForCausalLM

    if name in ("nemotron-h-tiny", DRAFT):
        cfg = nemotron_h_config(seq_len, draft=name == DRAFT)
        model = NemotronHForCausalLM(cfg)
        # Remove the dt floor: HF's NemotronHMamba2Mixer clamps dt from below at config.time_step_min in
        # its chunked path (and not at all in its one-token recurrent path). With time_step_min = 0 the
        # clamp is a no-op (softplus >= 0), matching time_step_limit = (0, inf) used by the kernel paths.
        model.config.time_step_min = 0.0
        for module in model.modules():
            if module.__class__.__name__ == "NemotronHMamba2Mixer":
                module.time_step_limit = (0.0, float("inf"))
    elif name == "qwen3-next-tiny":
        cfg = qwen3_next_config(seq_len)
        model = Qwen3NextForCausalLM(cfg)
        init_gdn_gates(model)
    else:
        raise SystemExit(f"unknown model {name!r}; expected one of {MODELS + (DRAFT,)}")
    return model


GDN_GATE_INIT = "A = exp(A_log) ~ U(1, 16), softplus(dt_bias) log-uniform in [0.001, 0.1] (floor 1e-4)"


def init_gdn_gates(model, dt_min=1e-3, dt_max=1e-1, dt_floor=1e-4, a_max=16.0):
    """Draw the Gated DeltaNet gate parameters as Mamba-2 draws its dt: the decay per token at zero gate
    input is exp(-A * softplus(dt_bias)) with A = exp(A_log) ~ U(1, a_max) and softplus(dt_bias) = dt
    log-uniform in [dt_min, dt_max], the time_step_min / max / floor of the Mamba-2 configs (and of
    nemotron-h-tiny above); FLA's GatedDeltaNet layer draws its gates the same way. HF's Qwen3NextGatedDeltaNet instead starts from
    dt_bias = 1 and A ~ U(0, 16): softplus(1) * A puts most heads' half-life under one token, and 1,115
    steps of training left every head of the first bundled model there (<= 1.1 tokens), which is not
    what a released GDN model looks like and leaves nothing for a state error to accumulate in."""
    n = 0
    for module in model.modules():
        if module.__class__.__name__ != "Qwen3NextGatedDeltaNet":
            continue
        h = module.dt_bias.numel()
        with torch.no_grad():
            dt = torch.exp(torch.rand(h) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
            dt = dt.clamp(min=dt_floor)
            module.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)
            module.A_log.copy_(torch.log(torch.empty(h).uniform_(1.0, a_max)))
        n += 1
    if n == 0:
        raise SystemExit("init_gdn_gates: no Qwen3NextGatedDeltaNet module found (transformers renamed it?)")


def ssd_chunk_scan_fp32(hidden_states, dt, A, B, C, chunk_size, D=None, dt_bias=None, initial_states=None,
                       dt_softplus=False, dt_limit=(0.0, float("inf")), return_final_states=False, **kwargs):
    """Training-speed stand-in for HF's torch `mamba2_chunk_scan` (same arguments, same math: the chunked
    SSD algorithm, all in fp32 with autocast off). transformers 5.17's version of that function forms
    [batch, chunk, l, s, heads, state] broadcast products (17 GB per layer at batch 32 x 1024 here), which
    made a training step take 1.6 s; this one contracts with matmuls. Used only inside the training
    loop (see --fast-ssd); every reported number and every sample comes from the stock HF function.
    x [b, T, h, p], dt [b, T, h], A [h], B and C [b, T, g, n]."""
    with torch.autocast(device_type=hidden_states.device.type, enabled=False):
        b, T, h, p = hidden_states.shape
        g, n = B.shape[2], B.shape[3]
        x = hidden_states.float()
        dt = dt.float()
        if dt_bias is not None:
            dt = dt + dt_bias.float()
        if dt_softplus:
            dt = F.softplus(dt)
        dt = dt.clamp(min=dt_limit[0], max=dt_limit[1])
        Bh = B.float().repeat_interleave(h // g, dim=2)
        Ch = C.float().repeat_interleave(h // g, dim=2)
        Q = chunk_size
        pad = (Q - T % Q) % Q
        if pad:
            x_p, dt_p = F.pad(x, (0, 0, 0, 0, 0, pad)), F.pad(dt, (0, 0, 0, pad))
            Bh, Ch = F.pad(Bh, (0, 0, 0, 0, 0, pad)), F.pad(Ch, (0, 0, 0, 0, 0, pad))
        else:
            x_p, dt_p = x, dt
        nc = (T + pad) // Q
        xs = (x_p * dt_p[..., None]).view(b, nc, Q, h, p)          # dt-scaled input
        Bc, Cc = Bh.view(b, nc, Q, h, n), Ch.view(b, nc, Q, h, n)
        a = (dt_p * A.float()).view(b, nc, Q, h).permute(0, 3, 1, 2)  # [b, h, c, Q] log decay per step
        acs = a.cumsum(-1)
        diff = acs[..., :, None] - acs[..., None, :]                 # [b, h, c, i, j]
        causal = torch.ones(Q, Q, dtype=torch.bool, device=x.device).tril()
        decay = diff.masked_fill(~causal, float("-inf")).exp()
        scores = torch.einsum("bcihn,bcjhn->bhcij", Cc, Bc) * decay
        y = torch.einsum("bhcij,bcjhp->bcihp", scores, xs)           # intra-chunk
        to_end = (acs[..., -1:] - acs).exp()                          # [b, h, c, Q]
        states = torch.einsum("bcjhn,bhcj,bcjhp->bchpn", Bc, to_end, xs)
        chunk_decay = acs[..., -1].exp()                              # [b, h, c]
        H = (initial_states.float() if initial_states is not None
             else torch.zeros(b, h, p, n, device=x.device, dtype=torch.float32))
        entering = []
        for c in range(nc):
            entering.append(H)
            H = H * chunk_decay[:, :, c, None, None] + states[:, c]
        entering = torch.stack(entering, 1)                           # [b, c, h, p, n]
        y = y + torch.einsum("bcihn,bchpn->bcihp", Cc, entering) * acs.exp().permute(0, 2, 3, 1)[..., None]
        y = y.reshape(b, nc * Q, h, p)[:, :T]
        if D is not None:
            y = y + D.float()[:, None] * x
        return (y, H) if return_final_states else y


class fast_ssd_training:
    """Context manager: HF's Nemotron-H torch chunk scan -> ssd_chunk_scan_fp32, restored on exit."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __enter__(self):
        if self.enabled:
            import transformers.models.nemotron_h.modeling_nemotron_h as mod

            self.mod, self.orig = mod, mod.mamba2_chunk_scan
            mod.mamba2_chunk_scan = ssd_chunk_scan_fp32
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self.mod.mamba2_chunk_scan = self.orig
        return False


def describe(model) -> dict:
    n_params = sum(p.numel() for p in model.parameters())
    n_embed = model.get_input_embeddings().weight.numel()
    return {"parameters": n_params, "parameters_without_embeddings": n_params - n_embed}


# --------------------------------------------------------------------------------------------------
# Data


def load_books(data_dir: Path, holdout: str):
    files = sorted(p for p in data_dir.glob("*.txt") if p.name.lower() != "readme.txt")
    if not files:
        raise SystemExit(f"no *.txt books in {data_dir}")
    names = [p.name for p in files]
    if holdout not in names:
        raise SystemExit(f"held-out book {holdout!r} not in {data_dir} ({names})")
    train_parts, train_names = [], []
    held = None
    for p in files:
        raw = p.read_bytes()
        if p.name == holdout:
            held = raw
        else:
            train_parts.append(raw)
            train_names.append(p.name)
    train = b"\n\n\n".join(train_parts)
    return train, held, train_names


def byte_tensor(b: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(b), dtype=torch.uint8).clone()


def eval_windows(held: torch.Tensor, seq_len: int, limit: int | None = None):
    """Non-overlapping windows of seq_len + 1 bytes over the held-out book (the last byte of a window is
    the first of the next). Every byte after the first is predicted exactly once."""
    n = (held.numel() - 1) // seq_len
    starts = torch.arange(n) * seq_len
    if limit is not None and limit < n:
        idx = torch.linspace(0, n - 1, limit).round().long()
        starts = starts[idx]
    return starts


@torch.no_grad()
def evaluate(model, held_dev, starts, seq_len, batch, device, autocast_dtype):
    model.eval()
    total_nll, total_n = 0.0, 0
    ar = torch.arange(seq_len + 1, device=device)
    for i in range(0, len(starts), batch):
        s = starts[i : i + batch].to(device)
        win = held_dev[s[:, None] + ar[None, :]].long()
        x, y = win[:, :-1], win[:, 1:]
        with torch.autocast(device_type=device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            logits = model(input_ids=x, logits_to_keep=0).logits
        nll = F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1), reduction="sum")
        total_nll += nll.item()
        total_n += y.numel()
    model.train()
    return total_nll / total_n / LN2  # bits per byte


# --------------------------------------------------------------------------------------------------
# Generation


@torch.no_grad()
def generate_text(model, prompt: str, n_new: int, device, sample: bool, seed: int = 0) -> tuple[str, str]:
    """Returns (text, method). Uses transformers' generate (with its cache); falls back to a plain
    no-cache loop if generate fails."""
    model.eval()
    ids = torch.tensor([list(prompt.encode("utf-8"))], device=device)
    torch.manual_seed(seed)
    try:
        kwargs = dict(max_new_tokens=n_new, do_sample=sample, pad_token_id=0, eos_token_id=None)
        if sample:
            kwargs.update(temperature=0.8, top_k=0, top_p=1.0)
        out = model.generate(ids, **kwargs)
        method = "transformers generate (" + ("sampled, temperature 0.8" if sample else "greedy") + ", cache on)"
    except Exception as e:  # noqa: BLE001
        print(f"generate() failed ({type(e).__name__}: {e}); using a plain loop", flush=True)
        out = ids
        for _ in range(n_new):
            logits = model(input_ids=out[:, -1024:], logits_to_keep=1).logits[:, -1].float()
            if sample:
                nxt = torch.multinomial(torch.softmax(logits / 0.8, -1), 1)
            else:
                nxt = logits.argmax(-1, keepdim=True)
            out = torch.cat([out, nxt], 1)
        method = "plain loop without cache (" + ("sampled, temperature 0.8" if sample else "greedy") + ")"
    model.train()
    text = bytes(out[0].tolist()).decode("utf-8", errors="replace")
    return text, method


# --------------------------------------------------------------------------------------------------
# Training


def lr_at(step, total, warmup, peak, floor):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * t))


def fixed_steps_command(args, name: str, steps: int) -> str:
    """The command that replays this run's schedule (same step count, warm-up, data order, seed)."""
    cmd = [f"python3 scripts/train_models.py --model {name} --steps {steps}"]
    for flag, val, default in (("--batch", args.batch, 32), ("--seq-len", args.seq_len, 1024), ("--lr", args.lr, 2e-3),
                               ("--warmup", args.warmup, 150), ("--seed", args.seed, 1234),
                               ("--holdout", args.holdout, "frankenstein.txt")):
        if val != default:
            cmd.append(f"{flag} {val:g}" if isinstance(val, float) else f"{flag} {val}")
    if name in ("nemotron-h-tiny", DRAFT) and not args.fast_ssd:
        cmd.append("--no-fast-ssd")
    return " ".join(cmd)


def git_commit() -> str:
    """The commit whose train_models.py runs: REPLAYSSM_GIT_COMMIT where the tree has no .git (the
    device's copy; set it to the commit of this script, not of other files), else HEAD, with
    "+dirty" when this script differs from HEAD's."""
    if os.environ.get("REPLAYSSM_GIT_COMMIT"):
        return os.environ["REPLAYSSM_GIT_COMMIT"]
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=root).stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "scripts/train_models.py"],
                               cwd=root).returncode == 1
        return head + ("+dirty" if dirty and head != "unknown" else "")
    except Exception:  # noqa: BLE001
        return "unknown"


def train_one(args, name: str) -> dict:
    import transformers

    device = torch.device(args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    autocast_dtype = torch.bfloat16 if device.type == "cuda" else None

    out_dir = Path(args.out) / name
    out_dir.mkdir(parents=True, exist_ok=True)
    log = open(out_dir / "train_log.txt", "w")

    def say(msg):
        line = f"[{name}] {msg}"
        print(line, flush=True)
        log.write(line + "\n")
        log.flush()

    train_bytes, held_bytes, train_names = load_books(Path(args.data_dir), args.holdout)
    train = byte_tensor(train_bytes).to(device)
    held = byte_tensor(held_bytes).to(device)
    say(f"train bytes {train.numel():,} from {len(train_names)} books; held-out {args.holdout} {held.numel():,} bytes")

    model = build_model(name, args.seq_len).to(device)
    info = describe(model)
    say(f"parameters {info['parameters']:,} ({info['parameters_without_embeddings']:,} without the embedding)")
    say(f"torch {torch.__version__}, transformers {transformers.__version__}, device {device}"
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""))
    kernel_pkgs = {pkg: importlib_find(pkg) for pkg in ("mamba_ssm", "causal_conv1d", "fla")}
    say(f"optional kernel packages present: {kernel_pkgs} (absent = HF torch fallback paths)")

    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.ndim >= 2 and "embed" not in n else no_decay).append(p)
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=(device.type == "cuda"),
    )

    eval_starts_small = eval_windows(held.cpu(), args.seq_len, args.eval_windows)
    eval_starts_full = eval_windows(held.cpu(), args.seq_len, args.final_eval_windows)
    gen = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    ar = torch.arange(args.seq_len + 1, device=device)
    hi = train.numel() - args.seq_len - 1

    curve = []
    total_steps = args.steps if args.steps else 10**9
    warmup = min(args.warmup, max(1, total_steps // 4)) if args.steps else args.warmup
    eval_every = args.eval_every if args.eval_every else (max(1, total_steps // 25) if args.steps else 50)
    calib_at = args.calibrate_steps
    t_start = time.time()
    t_calib0 = None
    run_loss, run_n = 0.0, 0
    step = 0
    fast = fast_ssd_training(args.fast_ssd and name in ("nemotron-h-tiny", DRAFT))
    fast.__enter__()
    if fast.enabled:
        say("training uses ssd_chunk_scan_fp32 in place of HF's torch mamba2_chunk_scan (same math, fp32); "
            "the final evaluation, the samples and the fixtures use the stock HF function")
    val0 = evaluate(model, held, eval_starts_small, args.seq_len, args.eval_batch, device, autocast_dtype)
    curve.append({"step": 0, "tokens": 0, "time_s": 0.0, "lr": 0.0, "train_loss": None, "train_bpb": None,
                  "heldout_bpb": val0})
    say(f"step 0 held-out bpb {val0:.4f}")
    model.train()
    while step < total_steps:
        if args.steps is None:
            if step == args.calibrate_from:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t_calib0 = time.time()
            if step == calib_at:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                per_step = (time.time() - t_calib0) / (calib_at - args.calibrate_from)
                elapsed = time.time() - t_start
                # reserve time for the held-out evaluations along the way
                budget_left = (args.time_budget - elapsed) * 0.93
                total_steps = max(calib_at + 10, calib_at + int(budget_left / per_step))
                warmup = min(args.warmup, max(calib_at, total_steps // 8))
                eval_every = max(10, total_steps // 25)
                say(f"measured {per_step * 1000:.1f} ms/step -> {total_steps} steps in the "
                    f"{args.time_budget:.0f} s budget, {warmup} warm-up; held-out eval every {eval_every} steps")
        lr = lr_at(step, total_steps if args.steps or step >= calib_at else 10**9, warmup, args.lr,
                   args.lr * args.min_lr_ratio)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, hi, (args.batch,), generator=gen).to(device, non_blocking=True)
        win = train[starts[:, None] + ar[None, :]].long()
        x, y = win[:, :-1], win[:, 1:]
        with torch.autocast(device_type=device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            logits = model(input_ids=x, logits_to_keep=0).logits
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        run_loss += loss.detach()
        run_n += 1
        step += 1
        hard_stop = args.steps is None and (time.time() - t_start) > args.time_budget * 1.2
        if step % eval_every == 0 or step == total_steps or hard_stop:
            tl = (run_loss / run_n).item()
            run_loss, run_n = 0.0, 0
            vb = evaluate(model, held, eval_starts_small, args.seq_len, args.eval_batch, device, autocast_dtype)
            el = time.time() - t_start
            curve.append({"step": step, "tokens": step * args.batch * args.seq_len, "time_s": round(el, 2),
                          "lr": lr, "train_loss": tl, "train_bpb": tl / LN2, "heldout_bpb": vb})
            say(f"step {step}/{total_steps} lr {lr:.2e} train loss {tl:.4f} ({tl / LN2:.4f} bpb) "
                f"held-out {vb:.4f} bpb  gnorm {gnorm.item():.2f}  {el:.0f} s")
        if hard_stop:
            say("time budget exceeded by 20%: stopping early")
            break
    if device.type == "cuda":
        torch.cuda.synchronize()
    train_time = time.time() - t_start
    fast.__exit__(None, None, None)
    steps_done = step
    say(f"training done: {steps_done} steps, {steps_done * args.batch * args.seq_len:,} tokens, {train_time:.0f} s")

    # Final held-out evaluation over the whole held-out book.
    bpb_autocast = evaluate(model, held, eval_starts_full, args.seq_len, args.eval_batch, device, autocast_dtype)
    model = model.to(torch.bfloat16)
    bpb_bf16 = evaluate(model, held, eval_starts_full, args.seq_len, args.eval_batch, device, None)
    model_fp32 = model.float()  # the saved bf16 weights, upcast
    bpb_fp32 = evaluate(model_fp32, held, eval_starts_full, args.seq_len, args.eval_batch, device, None)
    say(f"held-out {args.holdout}, {len(eval_starts_full)} windows x {args.seq_len}: "
        f"{bpb_bf16:.4f} bpb (bf16 weights, bf16 compute); {bpb_fp32:.4f} bpb (bf16 weights upcast, fp32 compute); "
        f"{bpb_autocast:.4f} bpb (fp32 master weights, bf16 autocast)")

    # Samples, with the saved (bf16-rounded) weights in fp32 compute.
    samples = []
    for prompt in args.prompts:
        for sample in (False, True):
            text, method = generate_text(model_fp32, prompt, args.sample_len, device, sample, seed=args.seed)
            samples.append({"prompt": prompt, "method": method, "text": text})
            say(f"--- {method}:\n{text}\n---")

    # Save in bf16.
    model = model_fp32.to(torch.bfloat16)
    model.config.use_cache = True
    model.save_pretrained(out_dir, safe_serialization=True)
    size = (out_dir / "model.safetensors").stat().st_size
    if name in ("nemotron-h-tiny", DRAFT):
        add_legacy_nemotron_keys(out_dir, model.config)

    result = {
        "model": name,
        "architecture": model.config.architectures[0] if model.config.architectures else type(model).__name__,
        **info,
        "safetensors_bytes": size,
        "heldout_book": args.holdout,
        "train_books": train_names,
        "train_bytes": int(train.numel()),
        "heldout_bytes": int(held.numel()),
        "heldout_windows": len(eval_starts_full),
        "heldout_bpb_bf16": bpb_bf16,
        "heldout_bpb_fp32": bpb_fp32,
        "heldout_bpb_autocast_master": bpb_autocast,
        "steps": steps_done,
        "batch": args.batch,
        "seq_len": args.seq_len,
        "tokens_seen": steps_done * args.batch * args.seq_len,
        "train_time_s": round(train_time, 1),
        "lr": args.lr,
        "min_lr_ratio": args.min_lr_ratio,
        "warmup": warmup,
        "weight_decay": args.weight_decay,
        "grad_clip": args.grad_clip,
        "seed": args.seed,
        "concurrent_with_other_model": bool(os.environ.get("REPLAYSSM_CMD")),
        "curve_eval_windows": len(eval_starts_small),
        "fast_ssd_in_training": fast.enabled,
        **({"gdn_gate_init": GDN_GATE_INIT} if name == "qwen3-next-tiny" else {}),
        "device": (torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "kernel_packages_present": kernel_pkgs,
        "git_commit": git_commit(),
        "command": fixed_steps_command(args, name, steps_done),
        "command_as_run": args.command_line,
        "samples": samples,
    }
    (out_dir / "curve.json").write_text(json.dumps({"model": name, "heldout_book": args.holdout,
                                                    "unit": "bits per byte (train_loss in nats)",
                                                    "points": curve}, indent=1))
    (out_dir / "samples.json").write_text(json.dumps(samples, indent=1, ensure_ascii=False))
    (out_dir / "training.json").write_text(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
    plot_curve(curve, out_dir / "curve.png", name, args.holdout)
    write_card(out_dir, result, model.config)
    say(f"saved {out_dir} (model.safetensors {size / 1e6:.1f} MB)")
    log.close()
    return result


def add_legacy_nemotron_keys(out_dir: Path, cfg):
    """transformers 5.x writes only `layers_block_type` (mamba -> "linear_attention", attention ->
    "full_attention"). Published Nemotron-H configs carry `hybrid_override_pattern` and
    `num_hidden_layers`; add them (transformers ignores both when `layers_block_type` is present) and
    check that the config still loads to the same layer list."""
    from transformers import AutoConfig

    path = out_dir / "config.json"
    d = json.loads(path.read_text())
    want = list(cfg.layers_block_type)
    d.setdefault("hybrid_override_pattern", cfg.hybrid_override_pattern)
    d.setdefault("num_hidden_layers", len(want))
    path.write_text(json.dumps(d, indent=2, sort_keys=True) + "\n")
    again = AutoConfig.from_pretrained(out_dir)
    assert list(again.layers_block_type) == want, (again.layers_block_type, want)
    assert again.time_step_min == 0.0, again.time_step_min


def importlib_find(pkg: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(pkg) is not None


def plot_curve(curve, path: Path, name: str, holdout: str):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001
        print(f"[{name}] matplotlib not available: no {path.name}", flush=True)
        return
    pts = [c for c in curve if c["train_bpb"] is not None]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    ax.plot([c["step"] for c in pts], [c["train_bpb"] for c in pts], label="train (mean over interval)")
    ax.plot([c["step"] for c in curve], [c["heldout_bpb"] for c in curve], marker="o", ms=3,
            label=f"held-out ({holdout}, subset)")
    ax.set_xlabel("step")
    ax.set_ylabel("bits per byte")
    ax.set_title(f"{name}: byte-level LM on public-domain books")
    lo = min([c["heldout_bpb"] for c in curve] + [c["train_bpb"] for c in pts])
    ax.set_ylim(max(0.0, lo - 0.2), min(8.5, max(c["heldout_bpb"] for c in curve[1:] or curve) + 1.0))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_card(out_dir: Path, r: dict, cfg):
    name = r["model"]
    if name in ("nemotron-h-tiny", DRAFT):
        arch = f"""`NemotronHForCausalLM` (model_type `nemotron_h`), {cfg.num_hidden_layers} blocks with pattern
`{cfg.hybrid_override_pattern}` (`M` Mamba-2, `-` squared-ReLU MLP, `*` attention); each block is
`h = h + mixer(RMSNorm(h))`, then a final RMSNorm and an untied `lm_head`.

| field | value |
|---|---|
| vocab | 256 (token id = byte value; no tokenizer, no special tokens) |
| hidden_size | {cfg.hidden_size} |
| Mamba-2 | {cfg.mamba_num_heads} heads x head_dim {cfg.mamba_head_dim} (d_inner {cfg.mamba_num_heads * cfg.mamba_head_dim}), ssm_state_size {cfg.ssm_state_size}, n_groups {cfg.n_groups}, conv_kernel {cfg.conv_kernel} (with bias), chunk_size {cfg.chunk_size}, no in/out projection bias |
| dt | softplus(dt + dt_bias), **no clamp**: `time_step_limit` = [0, inf] and `time_step_min` = 0.0 (see below) |
| attention | {cfg.num_attention_heads} query heads, {cfg.num_key_value_heads} KV heads, head_dim {cfg.head_dim}, no bias, **no positional encoding** |
| MLP | intermediate {cfg.intermediate_size}, `down(relu(up(x))^2)`, no bias |
| norms | RMSNorm eps {cfg.layer_norm_epsilon}; Mamba gated RMSNorm per group of {cfg.mamba_num_heads * cfg.mamba_head_dim // cfg.n_groups} channels (d_inner / n_groups), gate `y * silu(z)` before the norm |
| tie_word_embeddings | {cfg.tie_word_embeddings} |

**dt clamp.** In transformers {r['transformers']} (the version that trained it; the code is the same in 5.17.0 and 5.24.0) the torch path of
`NemotronHMamba2Mixer` sets `self.time_step_limit = (config.time_step_min, inf)` and ignores
`config.time_step_limit`: its chunked path (prefill / teacher-forced forward, `mamba2_chunk_scan`) clamps
`dt = clamp(softplus(dt_raw + dt_bias), min=time_step_min)`, while its one-token recurrent path
(`mamba2_selective_state_update`, used by `generate` after the prompt) applies no clamp at all. The
mamba_ssm kernels and NVIDIA's own code use `time_step_limit` (0, inf) (no clamp). This model was trained
and saved with `time_step_min` = 0.0 (the initial dt_bias was drawn with 0.001 before that), so the HF
floor is `clamp(min=0)`, a no-op on softplus output: every path computes the same unclamped dt.
"""
    else:
        la = cfg.layer_types
        arch = f"""`Qwen3NextForCausalLM` (model_type `qwen3_next`), {cfg.num_hidden_layers} layers with `layer_types`
{la} (Gated DeltaNet, with gated full attention every 4th layer); each layer is
`h = h + mixer(RMSNorm(h)); h = h + MLP(RMSNorm(h))`, then a final RMSNorm and an untied `lm_head`.
Every MLP is a dense SwiGLU (`num_experts` = 0, `mlp_only_layers` = all layers): no MoE weights.

| field | value |
|---|---|
| vocab | 256 (token id = byte value; no tokenizer, no special tokens) |
| hidden_size | {cfg.hidden_size} |
| Gated DeltaNet | {cfg.linear_num_key_heads} key heads, {cfg.linear_num_value_heads} value heads, head_k_dim {cfg.linear_key_head_dim}, head_v_dim {cfg.linear_value_head_dim}, conv_kernel {cfg.linear_conv_kernel_dim} (no bias); fused `in_proj_qkvz` / `in_proj_ba` laid out per key head (Qwen3-Next order) |
| attention | {cfg.num_attention_heads} query heads, {cfg.num_key_value_heads} KV heads, head_dim {cfg.head_dim}, sigmoid output gate (q_proj emits query and gate interleaved per head), q/k RMSNorm, partial RoPE: rotary dim {int(cfg.head_dim * cfg.rope_parameters['partial_rotary_factor'])} (factor {cfg.rope_parameters['partial_rotary_factor']}), theta {cfg.rope_parameters['rope_theta']:g} |
| MLP | SwiGLU, intermediate {cfg.intermediate_size} |
| norms | Qwen-style RMSNorm `x * rsqrt(mean(x^2) + eps) * (1 + w)` in fp32, eps {cfg.rms_norm_eps}; GDN output norm is a plain-weight gated RMSNorm per value head (norm, then `* silu(z)`) |
| tie_word_embeddings | {cfg.tie_word_embeddings} |
"""
    curve = json.loads((out_dir / "curve.json").read_text())["points"]
    b = min(curve[1:] or curve, key=lambda c: c["heldout_bpb"])
    last = curve[-1]
    best = {"n": r.get("curve_eval_windows", 48), "bpb": b["heldout_bpb"], "step": b["step"], "note": ""}
    if last["heldout_bpb"] - b["heldout_bpb"] > 0.02:
        best["note"] = (f" (it ends at {last['heldout_bpb']:.4f}: the model over-fits the "
                        f"{r['train_bytes'] / 1e6:.1f} MB training text, seen {r['tokens_seen'] / r['train_bytes']:.1f} times)")
    fast_note = ""
    note = ("\n\n" + r["note"]) if r.get("note") else ""
    if r.get("gdn_gate_init"):
        fast_note += (f"\nGated DeltaNet gates initialised as Mamba-2 draws dt (`init_gdn_gates`): {r['gdn_gate_init']}. "
                      "HF's default (dt_bias = 1) makes every head forget within about a token.")
    if r.get("fast_ssd_in_training"):
        fast_note = ("\nFor speed the training loop replaced HF's torch `mamba2_chunk_scan` (whose transformers 5.17 form "
                     "materialises [batch, chunk, l, s, heads, state] products) by `ssd_chunk_scan_fp32` in "
                     "`scripts/train_models.py`: the same chunked SSD math in fp32, checked against the HF function "
                     "to fp32 rounding (outputs and gradients). The held-out numbers and samples below use the stock "
                     "HF code.")
    samples = "\n".join(
        f"* {s['method']}, prompt `{s['prompt']}`:\n\n```text\n{s['text']}\n```\n" for s in r["samples"]
    )
    card = f"""# {name}

A small byte-level language model trained by this project (`replayssm`) as the engine's embedded
default and as a test fixture, with the Hugging Face `transformers` model class of the architecture it
mimics. Everything here was produced by `scripts/train_models.py`.

## Architecture

{arch}
Parameters: **{r['parameters']:,}** ({r['parameters_without_embeddings']:,} without the input embedding);
`model.safetensors` holds them in **bf16** ({r['safetensors_bytes'] / 1e6:.1f} MB).

## Data

Public-domain English novels from `shared/data/books` (header/licence removed), as raw UTF-8 bytes.
Trained on {', '.join('`' + b + '`' for b in r['train_books'])} ({r['train_bytes']:,} bytes, joined with blank
lines). **Held out: `{r['heldout_book']}`** ({r['heldout_bytes']:,} bytes), never trained on.

## Training

{r['steps']:,} steps of batch {r['batch']} x {r['seq_len']} bytes ({r['tokens_seen'] / 1e6:.1f} M tokens) in
{r['train_time_s']:.0f} s on one {r['device']}{', concurrently with the other bundled model' if r.get('concurrent_with_other_model') else ''}; AdamW (betas 0.9/0.95,
weight decay {r['weight_decay']} on matrices), peak lr {r['lr']:g}, {r['warmup']} warm-up steps, cosine decay to
{r['min_lr_ratio']:g} x peak, gradient clip {r['grad_clip']}, bf16 autocast with fp32 master weights, seed {r['seed']}.
Software: torch {r['torch']}, transformers {r['transformers']}, Python {r['python']}; optional kernel packages
present: {r['kernel_packages_present']} (all absent means the HF torch fallback paths were used).{fast_note}{note}

## Held-out result

Bits per byte on the whole held-out book, as {r['heldout_windows']} non-overlapping windows of {r['seq_len']}
bytes (each byte predicted once, with 0 to {r['seq_len'] - 1} bytes of context):

| weights / compute | bits per byte |
|---|---|
| saved bf16 weights, bf16 compute | **{r['heldout_bpb_bf16']:.4f}** |
| saved bf16 weights upcast, fp32 compute | {r['heldout_bpb_fp32']:.4f} |
| fp32 master weights, bf16 autocast (end of training) | {r['heldout_bpb_autocast_master']:.4f} |

Training curve: `curve.json` (step, train loss, held-out bits per byte on {best['n']} evenly spaced windows
of the held-out book) and `curve.png`. Lowest held-out value on the curve: {best['bpb']:.4f} at step
{best['step']} of {r['steps']}{best['note']}.

## Samples

With the saved weights upcast to fp32, {len(r['samples'][0]['text'].encode()) - len(r['samples'][0]['prompt'].encode())} new bytes
after each prompt:

{samples}
## Regenerate

From the repository root, on a machine with a CUDA GPU, torch and transformers:

```sh
{r['command']}
```

This replays the run's schedule: the same step count, warm-up, learning rates, data order and seed (GPU
arithmetic is not bit-reproducible, so expect close, not identical, weights). `--data-dir` defaults to
`../shared/data/books` and `--out` to `models/`. The run itself was
`{r['command_as_run']}` at commit `{r['git_commit']}`: without `--steps` the script fits the step count
to `--time-budget` seconds from the measured step time, and `--model all` trains both bundled models as
two concurrent processes on one GPU.

## Loading

```python
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained("models/{name}")  # token ids are byte values
```
"""
    (out_dir / "README.md").write_text(card)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="all", choices=MODELS + (DRAFT, "all"))
    here = Path(__file__).resolve().parent.parent
    ap.add_argument("--data-dir", default=str(here.parent / "shared" / "data" / "books"))
    ap.add_argument("--holdout", default="frankenstein.txt")
    ap.add_argument("--out", default=str(here / "models"))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=None, help="fixed step count (default: fit --time-budget)")
    ap.add_argument("--time-budget", type=float, default=300.0, help="seconds of training per model")
    ap.add_argument("--calibrate-from", type=int, default=10, help="step time is measured from this step...")
    ap.add_argument("--calibrate-steps", type=int, default=40, help="...to this one, then the step count is fixed")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--eval-every", type=int, default=None)
    ap.add_argument("--eval-windows", type=int, default=48)
    ap.add_argument("--eval-batch", type=int, default=32)
    ap.add_argument("--final-eval-windows", type=int, default=None, help="default: the whole held-out book")
    ap.add_argument("--sample-len", type=int, default=400)
    ap.add_argument("--prompts", nargs="+", default=["It was on a dreary night of November that ",
                                                     "\"I will tell you,\" said she, "])
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--fast-ssd", action=argparse.BooleanOptionalAction, default=True,
                    help="train Nemotron-H with ssd_chunk_scan_fp32 instead of HF's torch chunk scan")
    ap.add_argument("--rewrite-card", metavar="MODEL_DIR", default=None,
                    help="only rewrite MODEL_DIR/README.md from its training.json, samples.json and config.json")
    args = ap.parse_args()
    if args.rewrite_card:
        from transformers import AutoConfig

        d = Path(args.rewrite_card)
        r = json.loads((d / "training.json").read_text())
        r["samples"] = json.loads((d / "samples.json").read_text())
        write_card(d, r, AutoConfig.from_pretrained(d))
        print(f"rewrote {d / 'README.md'}")
        return
    args.command_line = "python3 scripts/train_models.py " + " ".join(
        a if a.replace("-", "").replace("_", "").replace(".", "").replace("/", "").isalnum() else json.dumps(a)
        for a in sys.argv[1:])
    # The command for the model card: the defaults for --data-dir / --out, the rest as given.
    canon = [f"python3 scripts/train_models.py --model {args.model}"]
    for flag, val, default in (("--time-budget", args.time_budget, 300.0), ("--steps", args.steps, None),
                               ("--batch", args.batch, 32), ("--lr", args.lr, 2e-3), ("--seed", args.seed, 1234),
                               ("--holdout", args.holdout, "frankenstein.txt")):
        if val != default:
            canon.append(f"{flag} {val:g}" if isinstance(val, float) else f"{flag} {val}")
    args.card_command = " ".join(canon)

    if args.model == "all":
        # One process per model, concurrently on the same device.
        procs = []
        for name in MODELS:
            cmd = [sys.executable, __file__] + [a for a in sys.argv[1:]]
            i = cmd.index("--model") if "--model" in cmd else None
            if i is not None:
                cmd[i + 1] = name
            else:
                cmd += ["--model", name]
            procs.append(subprocess.Popen(cmd, env=dict(os.environ, REPLAYSSM_CMD=args.command_line,
                                                         REPLAYSSM_CARD_CMD=args.card_command)))
        rcs = [p.wait() for p in procs]
        if any(rcs):
            raise SystemExit(f"training failed: exit codes {dict(zip(MODELS, rcs))}")
        for name in MODELS:
            r = json.loads((Path(args.out) / name / "training.json").read_text())
            print(f"{name}: {r['parameters']:,} params, held-out {r['heldout_book']} "
                  f"{r['heldout_bpb_bf16']:.4f} bpb (bf16) / {r['heldout_bpb_fp32']:.4f} (fp32), "
                  f"{r['steps']} steps in {r['train_time_s']:.0f} s")
        return
    if os.environ.get("REPLAYSSM_CMD"):
        args.command_line = os.environ["REPLAYSSM_CMD"]
        args.card_command = os.environ["REPLAYSSM_CARD_CMD"]
    train_one(args, args.model)


if __name__ == "__main__":
    main()
