#!/usr/bin/env bash
# scripts/test.sh and scripts/demo.sh keep the build log off stdout (on stderr): stdout is the
# command's own output (the test results, the generated text). Runs copies of both scripts in a
# scratch tree where setup.sh, ctest and the CLI are stubs that say which they are.
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/scripts" "$tmp/build/apps" "$tmp/bin"
cp "$src/scripts/test.sh" "$src/scripts/demo.sh" "$src/scripts/env.sh" "$tmp/scripts/"
printf '#!/usr/bin/env bash\necho "stub: build log"\n' > "$tmp/scripts/setup.sh"
printf '#!/usr/bin/env bash\necho "stub: ctest results"\n' > "$tmp/bin/ctest"
printf '#!/usr/bin/env bash\necho "cuda device: no CUDA device (stub)"\necho "stub: replayssm $*"\n' \
  > "$tmp/build/apps/replayssm"
chmod +x "$tmp/scripts/setup.sh" "$tmp/bin/ctest" "$tmp/build/apps/replayssm"
status=0
for script in test.sh demo.sh; do
  out=$(PATH="$tmp/bin:$PATH" RSSM_BUILD_DIR="$tmp/build" "$tmp/scripts/$script" 2>"$tmp/err") || {
    echo "$script: exit status $?"; status=1; continue; }
  err=$(cat "$tmp/err")
  case "$out" in *"stub: build log"*)
    echo "$script: the build log is on stdout:"; echo "$out"; status=1 ;; esac
  case "$err" in *"stub: build log"*) ;; *)
    echo "$script: no build log on stderr:"; echo "$err"; status=1 ;; esac
  expected="stub: ctest results"
  [ "$script" = demo.sh ] && expected="stub: replayssm generate"
  case "$out" in *"$expected"*) ;; *)
    echo "$script: stdout lacks '$expected':"; echo "$out"; status=1 ;; esac
done
# demo.sh checks its tokens with --compare, except when speculating (which --compare rejects),
# whichever spelling of the option is given.
for args in "" "-T 4" "-T4" "--speculate 4" "--speculate=4"; do
  # shellcheck disable=SC2086
  out=$(PATH="$tmp/bin:$PATH" RSSM_BUILD_DIR="$tmp/build" "$tmp/scripts/demo.sh" $args 2>/dev/null)
  case "$args:$out" in
    :*--compare*) ;;
    :*) echo "demo.sh: no --compare by default: $out"; status=1 ;;
    *--compare*) echo "demo.sh $args: --compare with speculative decoding: $out"; status=1 ;;
  esac
done
# demo.sh adds no ring length of its own: -L where nothing replays is an error (e.g. with
# --spec-mode snapshot), and generate's default is already 16.
out=$(PATH="$tmp/bin:$PATH" RSSM_BUILD_DIR="$tmp/build" "$tmp/scripts/demo.sh" -T 4 --spec-mode snapshot 2>/dev/null)
case "$out" in
  *--ring*|*" -L"*) echo "demo.sh -T 4 --spec-mode snapshot: passes a ring length: $out"; status=1 ;;
  *"stub: replayssm generate"*) ;;
  *) echo "demo.sh -T 4 --spec-mode snapshot: did not run generate: $out"; status=1 ;;
esac
exit $status
