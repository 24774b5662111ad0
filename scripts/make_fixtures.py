#!/usr/bin/env python3
"""Write logit-matching test fixtures from the Hugging Face `transformers` reference implementation.

For a trained model directory (config.json + model.safetensors, e.g. models/nemotron-h-tiny) this loads
the model with transformers in FP32 (bf16 weights upcast exactly), takes a few hundred bytes of the
book the model never saw in training as token ids (token id = byte value), runs one teacher-forced
forward pass and writes tests/fixtures/<name>/:

  tokens.json         JSON list of ints (the byte values), length T
  logits.safetensors  one tensor "logits", F32, shape [T, 256]: logits[t] = next-byte logits after
                      tokens[0..t] (the prediction for tokens[t+1])
  fixture.json        what produced it: transformers/torch versions, dtype, device, model dir, text
                      source, and exactly which HF code path ran (torch fallback vs kernels, dt clamp)

It also builds a tiny random-init Mamba2ForCausalLM (tests/fixtures/mamba2-tiny/, with its own
config.json + model.safetensors in FP32) and writes the same three files for it.

  python3 scripts/make_fixtures.py                              # all three fixtures
  python3 scripts/make_fixtures.py models/nemotron-h-tiny       # one trained model
  python3 scripts/make_fixtures.py --mamba2-tiny                # only the random Mamba-2 one
  python3 scripts/make_fixtures.py --out /tmp/fx                # elsewhere (e.g. to compare versions)
  python3 scripts/make_fixtures.py --cross-check /tmp/fx        # record max |diff| against fixtures
                                                                # made elsewhere (another version)
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import platform
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
VOCAB = 256
TRAINED = ("nemotron-h-tiny", "qwen3-next-tiny")


def weights_sha256(model_dir: Path) -> dict:
    """sha256 of each *.safetensors file of the checkpoint directory, by file name."""
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(model_dir.glob("*.safetensors"))}


def kernels_present() -> dict:
    return {pkg: importlib.util.find_spec(pkg) is not None for pkg in ("mamba_ssm", "causal_conv1d", "fla")}


def held_out_text(data_dir: Path, book: str, n_tokens: int, after: int) -> tuple[list[int], int]:
    raw = (data_dir / book).read_bytes()
    # start at the first paragraph break after byte `after`, so the text begins at a paragraph
    start = raw.index(b"\n\n", after) + 2
    toks = list(raw[start : start + n_tokens])
    assert len(toks) == n_tokens
    return toks, start


def code_path(model, kernels: dict) -> dict:
    """Describe the HF code path the forward pass took, from the loaded model and the installed source."""
    cfg = model.config
    mt = cfg.model_type
    no_kernels = not any(kernels.values())
    path = {"kernel_packages_present": kernels,
            "path": "HF torch fallback (no mamba_ssm / causal_conv1d / fla installed)" if no_kernels
            else "kernel packages present: HF may have used them (see kernel_packages_present)",
            "attn_implementation": getattr(cfg, "_attn_implementation", None)}
    if mt in ("mamba2", "nemotron_h"):
        mixers = [m for m in model.modules() if m.__class__.__name__.endswith("Mamba2Mixer")]
        lim = mixers[0].time_step_limit
        path["ssm"] = ("teacher-forced forward = chunked SSD scan (`mamba2_chunk_scan`, torch) with chunk_size "
                       f"{cfg.chunk_size}, recurrence math in fp32; conv = depthwise F.conv1d with k-1 left padding "
                       "+ bias, then SiLU")
        path["dt"] = (f"dt = softplus(dt_raw + dt_bias) then clamp(min={lim[0]}, max={lim[1]}) in the chunked path "
                      "(the mixer's time_step_limit attribute as loaded)")
        if mt == "nemotron_h":
            path["dt_clamp_source"] = ("NemotronHMamba2Mixer hard-codes time_step_limit = (config.time_step_min, inf) "
                                       "and ignores config.time_step_limit; the one-token recurrent path "
                                       "(mamba2_selective_state_update) applies no clamp. time_step_min is 0.0 in this "
                                       "checkpoint, so the clamp is a no-op: dt is not clamped anywhere.")
            path["dt_clamp"] = "none (time_step_min = 0.0 -> clamp(min=0) is a no-op on softplus output)"
            path["gated_norm"] = (f"y * silu(z) in fp32, RMS-normalised per group of "
                                  f"{cfg.mamba_num_heads * cfg.mamba_head_dim // cfg.n_groups} channels "
                                  f"(d_inner / n_groups), eps {cfg.layer_norm_epsilon}, then * weight")
        else:
            path["dt_clamp"] = f"time_step_limit {list(lim)} from config ({'no-op' if lim[0] <= 0 and math.isinf(lim[1]) else 'active'})"
            path["gated_norm"] = (f"y * silu(z) in fp32, RMS-normalised over d_inner / n_groups = "
                                  f"{cfg.num_heads * cfg.head_dim // cfg.n_groups} channels (n_groups = {cfg.n_groups}: "
                                  "transformers <= 5.17 normalises the whole d_inner, later versions per group; "
                                  "identical for n_groups = 1), eps "
                                  f"{cfg.layer_norm_epsilon}, then * weight")
            path["residual_in_fp32"] = cfg.residual_in_fp32
    if mt == "qwen3_next":
        path["gdn"] = ("teacher-forced forward = `torch_chunk_gated_delta_rule` (chunk 64, fp32, "
                       "q/k L2-normalised with eps 1e-6 inside rsqrt, q scaled by head_k_dim^-0.5, "
                       "key heads repeat-interleaved to value heads); conv = depthwise F.conv1d, no bias, then SiLU; "
                       "beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias) in fp32; output norm = "
                       "RMSNorm per value head (plain weight) then * silu(z)")
        path["attention"] = ("q_proj output viewed [heads, 2*head_dim] and split per head into query | gate; "
                             "q_norm/k_norm (1+w) per head before partial NeoX RoPE; output * sigmoid(gate) "
                             "before o_proj")
    return path


@torch.no_grad()
def decode_consistency(model, ids: torch.Tensor, logits_tf: torch.Tensor, prefill: int) -> dict:
    """Prefill `prefill` tokens with a cache, then feed the rest one token at a time through HF's
    recurrent (decode) path and compare with the teacher-forced logits."""
    # The cache argument (and output field) is `cache` from transformers 5.18 on, `past_key_values` /
    # `cache_params` (Mamba2) before; an unknown keyword would be swallowed by **kwargs and silently
    # drop the cache, so take the name from the signature.
    import inspect

    params = inspect.signature(model.forward).parameters
    kw = next(k for k in ("cache", "past_key_values", "cache_params") if k in params)
    out = model(input_ids=ids[:, :prefill], use_cache=True)
    cache = getattr(out, kw)
    assert cache is not None
    diffs = [(out.logits[0, -1].float() - logits_tf[prefill - 1]).abs().max().item()]
    for t in range(prefill, ids.shape[1]):
        out = model(input_ids=ids[:, t : t + 1], use_cache=True, **{kw: cache})
        cache = getattr(out, kw)
        diffs.append((out.logits[0, -1].float() - logits_tf[t]).abs().max().item())
    return {"prefill_tokens": prefill, "decode_steps": ids.shape[1] - prefill,
            "max_abs_diff": max(diffs), "max_abs_logit": logits_tf.abs().max().item(),
            "note": "HF's own one-token (recurrent) path against its teacher-forced (chunked) path, both fp32"}


def write_fixture(model, model_dir: Path, out_dir: Path, name: str, tokens: list[int], source: dict,
                  weights_note: str, regenerate: str, cross_check: Path | None, prefill: int):
    import transformers
    from safetensors.torch import load_file, save_file

    model.eval()
    ids = torch.tensor([tokens])
    logits = model(input_ids=ids, logits_to_keep=0).logits[0].float().contiguous()
    assert logits.shape == (len(tokens), VOCAB), logits.shape
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "tokens.json").write_text(json.dumps(tokens) + "\n")
    save_file({"logits": logits}, str(out_dir / "logits.safetensors"), metadata={"format": "pt"})

    tgt = ids[0, 1:]
    nll = torch.nn.functional.cross_entropy(logits[:-1].double(), tgt, reduction="mean").item()
    dec = decode_consistency(model, ids, logits, prefill)
    info = {
        "model": name,
        "architecture": model.config.architectures[0] if model.config.architectures else type(model).__name__,
        "model_dir": str(model_dir.relative_to(ROOT)) if model_dir.is_relative_to(ROOT) else str(model_dir),
        "weights": weights_note,
        # which weights: a retrained model needs its fixture regenerated (the test's failure says so)
        "weights_sha256": weights_sha256(model_dir),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": "cpu",
        "dtype": "float32 (weights and compute; torch.set_default_dtype untouched, TF32 not involved on CPU)",
        "code_path": code_path(model, kernels_present()),
        "text_source": source,
        "text": bytes(tokens).decode("utf-8", errors="replace"),
        "files": {
            "tokens.json": f"JSON list of {len(tokens)} ints in [0, 255] (token id = byte value)",
            "logits.safetensors": (f"tensor 'logits', F32, shape [{len(tokens)}, {VOCAB}], row t = next-token logits "
                                   "after tokens[0..t] from one teacher-forced forward over all tokens (no cache)"),
        },
        "teacher_forced_bits_per_byte": nll / math.log(2.0),
        "hf_decode_vs_teacher_forced": dec,
        "regenerate": regenerate,
    }
    if cross_check is not None:
        other = cross_check / name
        if (other / "logits.safetensors").exists():
            ol = load_file(str(other / "logits.safetensors"))["logits"]
            ot = json.loads((other / "tokens.json").read_text())
            of = json.loads((other / "fixture.json").read_text())
            assert ot == tokens, "cross-check fixture has different tokens"
            info["cross_check"] = {"transformers": of["transformers"], "torch": of["torch"],
                                   "max_abs_diff": (ol - logits).abs().max().item(),
                                   "note": "same weights and tokens through another transformers/torch version"}
    (out_dir / "fixture.json").write_text(json.dumps(info, indent=1, ensure_ascii=False) + "\n")
    print(f"{name}: wrote {out_dir} (T={len(tokens)}, {info['teacher_forced_bits_per_byte']:.3f} bits/byte teacher-forced, "
          f"HF decode vs teacher-forced max |diff| {dec['max_abs_diff']:.2e})", flush=True)


def check_weights_equal(model, model_dir: Path):
    """The fp32 model must hold exactly the saved tensors, upcast."""
    from safetensors.torch import load_file

    saved = load_file(str(model_dir / "model.safetensors"))
    sd = model.state_dict()
    dtypes = set()
    for k, v in saved.items():
        dtypes.add(str(v.dtype).replace("torch.", ""))
        mk = k if k in sd else next((m for m in sd if m.endswith(k.split(".", 1)[1])), None)
        assert mk is not None, f"saved tensor {k} not in the model"
        assert torch.equal(sd[mk].float(), v.float()), f"{k}: loaded weights differ from the file"
    return sorted(dtypes)


def fixture_for_model(model_dir: Path, args):
    from transformers import AutoModelForCausalLM

    model_dir = model_dir.resolve()
    name = model_dir.name
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    dtypes = check_weights_equal(model, model_dir)
    training = json.loads((model_dir / "training.json").read_text()) if (model_dir / "training.json").exists() else {}
    book = training.get("heldout_book", args.holdout)
    tokens, start = held_out_text(Path(args.data_dir), book, args.tokens, args.offset)
    source = {"book": book, "held_out_from_training": True, "byte_offset": start, "length": len(tokens),
              "rule": f"first paragraph break at or after byte {args.offset}, then {args.tokens} bytes"}
    rel = model_dir.relative_to(ROOT) if model_dir.is_relative_to(ROOT) else model_dir
    write_fixture(model, model_dir, Path(args.out) / name, name, tokens, source,
                  f"{rel}/model.safetensors ({', '.join(dtypes)} on disk), loaded with dtype=float32 (exact upcast)",
                  f"python3 scripts/make_fixtures.py {rel}", args.cross_check, args.prefill)


def build_mamba2_tiny(out_dir: Path, seed: int):
    """A tiny random Mamba2ForCausalLM, with the random init perturbed so every parameter matters."""
    from transformers import Mamba2Config, Mamba2ForCausalLM

    torch.manual_seed(seed)
    cfg = Mamba2Config(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_heads=4, head_dim=32, expand=2,
        state_size=64, n_groups=1, conv_kernel=4, use_bias=False, use_conv_bias=True, chunk_size=128,
        residual_in_fp32=True, layer_norm_epsilon=1e-5, tie_word_embeddings=True,
        time_step_limit=(0.0, float("inf")), pad_token_id=None, bos_token_id=None, eos_token_id=None,
    )
    model = Mamba2ForCausalLM(cfg).float()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight") or n.endswith("norm_f.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif n.endswith(".D"):
                p.copy_(1.0 + 0.5 * torch.randn(p.shape, generator=g))
            elif n.endswith(".A_log"):
                p.copy_(torch.log(torch.empty(p.shape).uniform_(1.0, 16.0, generator=g)))
            elif n.endswith("conv1d.bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif n.endswith(".dt_bias"):
                # softplus^-1 of dt drawn log-uniformly in [0.001, 0.1] (HF's own init, made explicit)
                dt = torch.exp(torch.empty(p.shape).uniform_(math.log(1e-3), math.log(1e-1), generator=g))
                p.copy_(dt + torch.log(-torch.expm1(-dt)))
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    gen_cfg = out_dir / "generation_config.json"
    if gen_cfg.exists():
        gen_cfg.unlink()


def fixture_mamba2_tiny(args):
    from transformers import AutoModelForCausalLM

    out_dir = Path(args.out) / "mamba2-tiny"
    if not args.reuse_mamba2 or not (out_dir / "model.safetensors").exists():
        build_mamba2_tiny(out_dir, args.seed)
    model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager")
    dtypes = check_weights_equal(model, out_dir)
    tokens, start = held_out_text(Path(args.data_dir), args.holdout, args.tokens, args.offset)
    source = {"book": args.holdout, "byte_offset": start, "length": len(tokens),
              "rule": f"first paragraph break at or after byte {args.offset}, then {args.tokens} bytes"}
    rel = out_dir.resolve().relative_to(ROOT) if out_dir.resolve().is_relative_to(ROOT) else out_dir
    write_fixture(model, out_dir.resolve(), out_dir, "mamba2-tiny", tokens, source,
                  f"{rel}/model.safetensors ({', '.join(dtypes)} on disk; random init, seed {args.seed}, "
                  "lm_head tied to the embedding so absent from the file)",
                  "python3 scripts/make_fixtures.py --mamba2-tiny", args.cross_check, args.prefill)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dirs", nargs="*", help=f"trained model dirs (default: models/{{{','.join(TRAINED)}}} "
                                                  "and the mamba2-tiny fixture)")
    ap.add_argument("--mamba2-tiny", action="store_true", help="(only) the random-init Mamba2 fixture")
    ap.add_argument("--reuse-mamba2", action="store_true",
                    help="keep an existing mamba2-tiny model.safetensors (e.g. when checking another version)")
    ap.add_argument("--out", default=str(ROOT / "tests" / "fixtures"))
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data" / "books"))
    ap.add_argument("--holdout", default="frankenstein.txt")
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--offset", type=int, default=100000)
    ap.add_argument("--prefill", type=int, default=8, help="tokens prefilled before the decode-path check")
    ap.add_argument("--seed", type=int, default=20251130)
    ap.add_argument("--cross-check", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))

    dirs = [Path(d) for d in args.model_dirs]
    if not dirs and not args.mamba2_tiny:
        dirs = [ROOT / "models" / n for n in TRAINED]
        args.mamba2_tiny = True
    for d in dirs:
        fixture_for_model(d, args)
    if args.mamba2_tiny:
        fixture_mamba2_tiny(args)


if __name__ == "__main__":
    sys.exit(main())
