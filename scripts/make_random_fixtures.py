#!/usr/bin/env python3
"""Architecture-coverage fixtures for the engine: tiny random-weight checkpoints of every layout the
engine loads (MoE blocks, Qwen3.5's split GDN projections, ...) with the logits transformers
computes for them, teacher-forced, in float32.

Each fixture is a self-contained directory tests/fixtures/<name>/:
  config.json, model.safetensors   the checkpoint, as save_pretrained writes it (float32)
  tokens.json                      the input ids (list of ints)
  logits.safetensors               "logits" F32 [T, vocab] from transformers (torch fallback paths)
  fixture.json                     transformers / torch versions, class, dtype, how it was made

Weights are redrawn after construction so that routers do not tie and the SSM dynamics look like a
trained model's (decays spread over (0, 1), dt ~ 0.01-0.1). Run on CPU:
  python scripts/make_random_fixtures.py [--out tests/fixtures] [--tokens 64]
"""
import argparse
import json
import math
import os

import torch
import transformers
from safetensors.torch import save_file


def redraw(model, seed):
    g = torch.Generator().manual_seed(seed)
    qwen = "qwen" in model.config.model_type
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.split(".")[-1]
            if name.endswith("A_log"):
                lo, hi = (-1.0, 1.5) if qwen else (0.0, 2.7)
                p.copy_(torch.rand(p.shape, generator=g) * (hi - lo) + lo)
            elif name.endswith("dt_bias"):
                lo, hi = (-1.0, 1.0) if qwen else (-4.5, -2.5)
                p.copy_(torch.rand(p.shape, generator=g) * (hi - lo) + lo)
            elif name.endswith(".D"):
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif "e_score_correction_bias" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            elif p.dim() == 1 and "norm" in name:
                plain = "mixer.norm" in name or "linear_attn.norm" in name or not qwen
                if plain:
                    p.copy_(torch.rand(p.shape, generator=g) * 0.4 + 0.8)
                else:  # Qwen RMSNorm multiplies by (1 + w)
                    p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            elif "conv1d" in name:
                p.copy_(torch.randn(p.shape, generator=g) * (0.5 if leaf == "weight" else 0.1))
            elif "embed" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            elif p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
        for name, b in model.named_buffers():
            if "e_score_correction_bias" in name:
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)


def routing_margin(model, ids):
    """Smallest gap, over tokens and MoE layers, between the last chosen and the first unchosen
    expert's routing score (router logit for Qwen's softmax router; sigmoid + correction bias for
    Nemotron-H, and between the kept and dropped groups' scores). Engines that round activations to bf16 flip
    routes whose gap is below ~1e-3, so fixtures meant for them are drawn with wide margins."""
    gaps = []

    def hook(mod, inp, out):
        x = inp[0].reshape(-1, inp[0].shape[-1]).float()
        logits = x @ mod.weight.float().t()
        k = mod.top_k
        if hasattr(mod, "e_score_correction_bias"):
            score = logits.sigmoid() + mod.e_score_correction_bias
            g = mod.num_group
            if g > 1:
                grp = score.view(-1, g, score.shape[-1] // g).topk(2, dim=-1)[0].sum(-1)
                gs = grp.sort(-1, descending=True).values
                gaps.append((gs[:, mod.topk_group - 1] - gs[:, mod.topk_group]).min())
                keep = grp.topk(mod.topk_group, dim=-1)[1]
                mask = torch.zeros_like(grp).scatter_(1, keep, 1).bool()
                score = score.masked_fill(~mask.repeat_interleave(score.shape[-1] // g, 1),
                                          float("-inf"))
        else:  # softmax is monotone: the order and its gaps are those of the logits
            score = logits
        s = score.sort(-1, descending=True).values
        finite = torch.isfinite(s[:, k])
        if finite.any():
            gaps.append((s[finite, k - 1] - s[finite, k]).min())

    handles = [mod.register_forward_hook(hook) for name, mod in model.named_modules()
               if name.endswith(("mlp.gate", "mixer.gate"))]
    with torch.no_grad():
        model(ids, use_cache=False)
    for h in handles:
        h.remove()
    return min(float(g) for g in gaps) if gaps else float("inf")


def tiny_configs():
    from transformers import (NemotronHConfig, Qwen3NextConfig)
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig
    gdn = dict(vocab_size=256, hidden_size=64, linear_num_key_heads=2, linear_num_value_heads=4,
               linear_key_head_dim=16, linear_value_head_dim=16, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, intermediate_size=96,
               max_position_embeddings=4096)
    return {
        "nemotron-h-moe-random": (transformers.NemotronHForCausalLM, NemotronHConfig(
            vocab_size=256, hidden_size=64, num_hidden_layers=4, hybrid_override_pattern="ME*E",
            mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=16, n_groups=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=96,
            n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
            moe_shared_expert_intermediate_size=48, n_shared_experts=1, n_group=2, topk_group=1,
            routed_scaling_factor=2.5, norm_topk_prob=True, max_position_embeddings=4096)),
        "nemotron-h-latent-moe-random": (transformers.NemotronHForCausalLM, NemotronHConfig(
            vocab_size=256, hidden_size=64, num_hidden_layers=3, hybrid_override_pattern="MEM",
            mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=16, n_groups=1,
            intermediate_size=96, n_routed_experts=6, num_experts_per_tok=3,
            moe_intermediate_size=24, moe_shared_expert_intermediate_size=40, n_shared_experts=1,
            moe_latent_size=32, routed_scaling_factor=1.5, max_position_embeddings=4096)),
        "qwen3-next-moe-random": (transformers.Qwen3NextForCausalLM, Qwen3NextConfig(
            num_hidden_layers=4, layer_types=["linear_attention", "full_attention",
                                              "linear_attention", "linear_attention"],
            num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=48, decoder_sparse_step=1, mlp_only_layers=[2],
            **gdn)),
        "qwen3.5-random": (transformers.Qwen3_5ForCausalLM, Qwen3_5TextConfig(
            num_hidden_layers=4, layer_types=["linear_attention", "linear_attention",
                                              "full_attention", "linear_attention"],
            tie_word_embeddings=True, **gdn)),
        "qwen3.5-moe-random": (transformers.Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig(
            num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
            num_experts=6, num_experts_per_tok=2, moe_intermediate_size=24,
            shared_expert_intermediate_size=40, **gdn)),
        # SSM sizes the CUDA kernels run (d_state / head_k_dim 64), so that the CUDA engine's MoE
        # is checked against transformers too.
        "nemotron-h-moe-random-s64": (transformers.NemotronHForCausalLM, NemotronHConfig(
            vocab_size=256, hidden_size=64, num_hidden_layers=3, hybrid_override_pattern="ME*",
            mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=64, n_groups=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=96,
            n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
            moe_shared_expert_intermediate_size=48, n_shared_experts=1, n_group=2, topk_group=1,
            routed_scaling_factor=2.5, norm_topk_prob=True, max_position_embeddings=4096)),
        "qwen3.5-moe-random-k64": (transformers.Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig(
            num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
            num_experts=6, num_experts_per_tok=2, moe_intermediate_size=24,
            shared_expert_intermediate_size=40,
            **{**gdn, "linear_key_head_dim": 64, "linear_value_head_dim": 64})),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures"))
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--only", action="append", help="fixture names to make (default: all)")
    args = ap.parse_args()
    torch.manual_seed(0)
    for i, (name, (cls, cfg)) in enumerate(tiny_configs().items()):
        if args.only and name not in args.only:
            continue
        model = cls(cfg).float().eval()
        ids = torch.randint(0, cfg.vocab_size, (1, args.tokens),
                            generator=torch.Generator().manual_seed(2000 + i))
        # The "-s64" / "-k64" fixtures also run on the CUDA engine (bf16 activations): redraw until
        # no token's routing is within 1e-2 of a tie.
        wide = name.endswith(("-s64", "-k64"))
        # A Qwen router's logits are scaled x8 for it (sharper routing, wider logit gaps).
        qwen_router = "qwen" in cfg.model_type
        need = 5e-2 if qwen_router else 1e-2
        for attempt in range(500):
            redraw(model, 1000 + i + 7919 * attempt)
            if wide and qwen_router:
                with torch.no_grad():
                    for n, p in model.named_parameters():
                        if n.endswith("mlp.gate.weight"):
                            p.mul_(8.0)
            margin = routing_margin(model, ids)
            if not wide or margin >= need:
                break
        else:
            raise SystemExit(f"{name}: no draw with routing margin >= {need}")
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        model.save_pretrained(d, safe_serialization=True)
        with torch.no_grad():
            logits = model(ids, use_cache=False).logits[0].float().contiguous()
        save_file({"logits": logits}, os.path.join(d, "logits.safetensors"))
        with open(os.path.join(d, "tokens.json"), "w") as f:
            json.dump(ids[0].tolist(), f)
        with open(os.path.join(d, "fixture.json"), "w") as f:
            json.dump({"class": cls.__name__, "transformers": transformers.__version__,
                       "torch": torch.__version__, "dtype": "float32", "weights": "random (redrawn)",
                       "path": "torch fallback (no mamba_ssm / causal_conv1d / FLA kernels)",
                       "routing_margin": margin,
                       "tokens": args.tokens, "made_by": "scripts/make_random_fixtures.py"}, f,
                      indent=2)
        print(f"{name}: routing margin {margin:.3g}, {sum(p.numel() for p in model.parameters())} params, logits "
              f"{tuple(logits.shape)}, max |logit| {logits.abs().max():.3f}")


if __name__ == "__main__":
    main()
