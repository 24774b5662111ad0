#!/usr/bin/env bash
# README command one: set up, build, and run the main job — the bundled byte-level Nemotron-H model
# (models/nemotron-h-tiny, trained by scripts/train_models.py) generates text from a prompt with
# ReplaySSM decoding, on CUDA when a GPU is present and on the CPU otherwise, then decodes again
# conventionally and reports whether the tokens agree. Extra arguments go to `replayssm generate`
# and replace the defaults they name (e.g. --model models/qwen3-next-tiny, --prompt "...",
# -n 400, --temperature 0.8).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RSSM_TARGETS=replayssm_cli "$root/scripts/setup.sh" >&2  # build output off stdout: stdout is the text
source "$root/scripts/env.sh"
model=(--model "$root/models/nemotron-h-tiny")
prompt=(--prompt "It was a dark and stormy night; the rain fell in torrents, and")
tokens=(--max-new-tokens 300)
compare=(--compare)  # decode again conventionally and check the tokens (not with --speculate)
for a in "$@"; do
  case "$a" in
    --model|--model=*) model=() ;;
    --prompt|--prompt=*|--prompts|--prompts=*|--prompt-ids|--prompt-ids=*) prompt=() ;;
    -n|-n*|--max-new-tokens|--max-new-tokens=*) tokens=() ;;
    -T|-T*|--speculate|--speculate=*) compare=() ;;
  esac
done
exec "${RSSM_BUILD_DIR:-$root/build}/apps/replayssm" generate "${model[@]}" "${prompt[@]}" \
  "${tokens[@]}" "${compare[@]}" "$@"
