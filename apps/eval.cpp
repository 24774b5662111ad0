// `replayssm eval`: teacher-forced accuracy of SSM state modes over a text (issue 10). The text's
// bytes are split into windows decoded as one batch; each --state mode runs as a candidate next to
// the conventional fp32 reference, and KL, top-1 agreement and bits per byte are reported per
// position bucket (engine/include/replayssm/engine/eval.h), as a table and as JSON.
#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cli_checks.h"
#include "cli_words.h"
#include "commands.h"
#include "cuda/device.h"
#include "eval_report.h"
#include "progress.h"
#include "run_info.h"
#include "replayssm/engine/checkpoint.h"
#include "replayssm/engine/config.h"
#include "replayssm/engine/eval.h"
#include "replayssm/engine/tokenizer.h"
#include "replayssm/errors.h"
#include "replayssm/precision.h"
#include "threads.h"

namespace replayssm::cli {
namespace {

struct EvalArgs {
  std::string model, text, device = "auto", ssm = "auto", reference = "conventional", json_out,
      commit;
  std::vector<std::string> states = {"fp32"};
  std::vector<int64_t> buckets = engine::default_bucket_edges();
  int64_t tokens = 0;
  int64_t windows = 1;
  int ring = 16;
  bool ring_given = false;  ///< -L was on the command line (not its default)
};

/// The engine's spelling of a state mode: "fp32/fp32" is the engine's "fp32"; others as given.
std::string engine_state(const std::string& mode) { return mode == "fp32/fp32" ? "fp32" : mode; }

/// The text's bytes as tokens, the first --tokens of them; file_bytes gets the file's size.
std::vector<int32_t> read_text(const EvalArgs& a, int64_t& file_bytes) {
  std::ifstream f(a.text, std::ios::binary);
  check<ConfigError>(f.good(), "--text: cannot read '", a.text, "'");
  const std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  file_bytes = int64_t(s.size());
  check<ConfigError>(a.tokens <= int64_t(s.size()), "--tokens ", a.tokens, ": '", a.text,
                     "' has only ", s.size(), " bytes");
  // (the engine checks it too, without the flag)
  check<ConfigError>(a.tokens > 0 || s.size() >= 2, "--text: '", a.text, "' has ", s.size(),
                     " byte", plural_s(int64_t(s.size())),
                     ", expected at least 2 (a window needs 2 tokens)");
  return engine::byte_encode(a.tokens > 0 ? s.substr(0, size_t(a.tokens)) : s);
}

/// A split state mode on the ReplaySSM path first reads its read copy on the step after the
/// first flush (step L - 1 at the latest): windows of L + 1 tokens or fewer never read it, and
/// at L = 1 (a flush every step) no window does (fp16sr/fp16sr, which has no copy, reads its
/// rounded checkpoint the same way, and is measurable at L = 1). With the ring length given (L >= 1),
/// ConfigError before any model is loaded: at L = 1 naming -L; else naming --windows and the
/// counts that work for the text's N tokens, or --tokens and the L that works where no window
/// can be long enough. The dispatcher's L (-L 0) is left to the engine's message.
void check_split_windows(const engine::EvalConfig& c, const EvalArgs& a, int64_t N) {
  const std::string& s = c.options.state;
  if (c.options.ssm != engine::SsmMode::kReplay || a.ring < 1 || s == "fp32" || s == "bf16" ||
      s == "fp16")
    return;
  StateMode mode;
  try {
    mode = parse_state_mode(s);
  } catch (const Error&) {
    return;  // an unknown mode: the engine names it with the valid ones
  }
  if (!mode.is_split()) return;
  // fp16sr/fp16sr has no copy: its steps read the rounded checkpoint, measurable at L = 1 too.
  check<ConfigError>(a.ring >= 2 || !mode.has_read_copy(), "-L 1: '", c.label, "' is a split "
                     "state mode, and at L = 1 (a flush every step) it never reads its read copy: "
                     "use -L 2 or more");
  const int64_t window = N / a.windows, most = N / (a.ring + 2);
  if (window - 1 > a.ring) return;
  const std::string why = fmt::format(
      " tokens are too short for '{}' at L = {} (its {} is first read after the first flush, at "
      "step L - 1): ", c.label, a.ring, mode.has_read_copy() ? "read copy" : "rounded checkpoint");
  if (most < 1)
    throw ConfigError(fmt::format("--tokens: {}{}a window needs more than L + 1 = {} tokens (more "
                                  "--tokens{})", N, why, a.ring + 1,
                                  N - 2 >= 2 ? ", or -L 2 to " + std::to_string(N - 2) : ""));
  throw ConfigError(fmt::format("--windows {}: windows of {}{}windows need more than L + 1 = {} "
                                "tokens (--windows 1 to {} for {} tokens)",
                                a.windows, window, why, a.ring + 1, most, N));
}

int run_eval(const EvalArgs& args) {
  EvalArgs a = args;
  if (a.device == "auto") a.device = cuda::device_count() > 0 ? "cuda" : "cpu";
  for (size_t i = 1; i < a.buckets.size(); ++i)  // (the engine checks it too, without the flag)
    check<ConfigError>(a.buckets[i] > a.buckets[i - 1], "--buckets: bucket edges must increase: ",
                       a.buckets[i - 1], " then ", a.buckets[i]);
  const engine::ModelConfig cfg = engine::parse_config_of(engine::Checkpoint::open(a.model));
  check<ConfigError>(
      cfg.vocab_size == 256,
      "--model: '", a.model, "' is not a byte-level model (vocab 256); eval reads text as bytes "
      "(no tokenizer.json reader yet)");
  int64_t file_bytes = 0;
  const std::vector<int32_t> tokens = read_text(a, file_bytes);
  // --windows against the text (the engine checks it too, without the flag).
  const int64_t N = int64_t(tokens.size()), window = N / a.windows;
  check<ConfigError>(window >= 2, "--windows ", a.windows, ": ", N, " tokens make windows of ",
                     window, " token", plural_s(window), ", expected at least 2 (--windows 1 to ",
                     N / 2, " for ", N, " tokens)");
  if (!a.json_out.empty()) check_writable(a.json_out, "--json");  // before hours of work

  engine::EvalConfig ref;
  ref.label = "fp32/fp32";
  ref.options.ssm = a.reference == "replay" ? engine::SsmMode::kReplay
                                            : engine::SsmMode::kConventional;
  ref.options.ring_L = a.ring;
  ref.options.state = "fp32";
  ref.options.cuda = a.device == "cuda";
  std::vector<engine::EvalConfig> cands;
  std::vector<std::string> emulated;
  for (const std::string& given : a.states) {
    // "fp32, fp32/bf16": the spaces around a comma are not part of the names.
    const size_t b = given.find_first_not_of(" \t"), e = given.find_last_not_of(" \t");
    const std::string mode = b == std::string::npos ? std::string() : given.substr(b, e - b + 1);
    check<ConfigError>(!mode.empty(), "--state: empty mode name");
    engine::EvalConfig c = ref;
    c.label = state_label(engine_state(mode));
    for (const auto& other : cands)
      check<ConfigError>(other.label != c.label, "--state: '", c.label, "' given twice");
    // auto: shared baselines run conventional, every other mode ReplaySSM.
    const bool conventional =
        a.ssm == "conventional" || (a.ssm == "auto" && mode.rfind("shared-", 0) == 0);
    c.options.ssm = conventional ? engine::SsmMode::kConventional : engine::SsmMode::kReplay;
    c.options.ring_L = a.ring;
    c.options.state = engine_state(mode);
    // CUDA: modes without kernels of their own run emulated (same values, fp32 storage).
    c.options.emulate_state = c.options.cuda;
    if (c.options.cuda && !engine::cuda_state_native(cfg, c.options.state))
      emulated.push_back(c.label);
    check_split_windows(c, a, N);
    cands.push_back(c);
  }
  // -L is the ring length of ReplaySSM decoding: a run with no replay in it would drop it silently.
  const bool any_replay =
      ref.options.ssm == engine::SsmMode::kReplay ||
      std::any_of(cands.begin(), cands.end(),
                  [](const engine::EvalConfig& c) { return c.options.ssm == engine::SsmMode::kReplay; });
  check<ConfigError>(!a.ring_given || any_replay, "-L ", a.ring, ": the ring length of ReplaySSM "
                     "decoding, but every mode here and the reference decode without a ring (--ssm ",
                     a.ssm, ", --reference ", a.reference, "): drop -L, or add a replayed --state "
                     "mode or --reference replay");
  engine::EvalOptions eo;
  eo.windows = a.windows;
  eo.bucket_edges = a.buckets;

  const int64_t steps = window - 1;  // per window (at least 2 tokens, checked above)
  Progress bar(fmt::format("eval ({} window{})", a.windows, plural_s(a.windows)),
               long(std::max<int64_t>(steps, 0)));
  const engine::EvalResult r = engine::evaluate(a.model, tokens, ref, cands, eo,
                                                [&](int64_t, int64_t) { bar.tick(); });
  bar.done();

  const EvalRunInfo info{a.model, a.text, a.device, a.commit.empty() ? git_commit() : a.commit,
                         file_bytes, a.buckets, emulated};
  print_eval_table(info, r);
  if (!a.json_out.empty()) {
    std::ofstream f(std::filesystem::path(a.json_out));
    check<ConfigError>(f.good(), "--json: cannot write '", a.json_out, "'");
    f << eval_json(info, r).dump(2) << "\n";
    fmt::print("wrote {}\n", a.json_out);
  }
  return 0;
}

/// --tokens: 0 (the whole text) or 2 .. 2^40 (one token predicts nothing), checked while parsing
/// so that the error names the flag and the range.
CLI::Validator tokens_validator() {
  constexpr int64_t kMax = int64_t{1} << 40;
  const std::string range = "0 (the whole text) or 2 to " + std::to_string(kMax);
  return CLI::Validator(
      [range](std::string& s) -> std::string {
        const std::string err = in_range(int64_t(0), kMax)(s);
        int64_t x = 0;
        if (err.rfind("value ", 0) == 0 || (err.empty() && parse_decimal(s, x) && x == 1))
          return "value " + s + " not in range: " + range;
        return err;  // not a whole number
      },
      "INT in {0} or [2 - " + std::to_string(kMax) + "]");
}

}  // namespace

void add_eval(CLI::App& app, Action& action) {
  auto* a = new EvalArgs;  // lives as long as the app (the process)
  auto* sub = app.add_subcommand(
      "eval", "teacher-forced KL, top-1 agreement and bits per byte of SSM state modes over a "
              "text, against an fp32 reference (conventional decoding unless --reference replay)");
  sub->option_defaults()->always_capture_default();  // --help shows every default
  sub->footer(comma_list_footer("--state fp32,fp32/bf16"));
  sub->add_option("--model", a->model, "checkpoint directory (config.json + *.safetensors), "
                                       "byte-level vocabulary")
      ->required()->check(CLI::ExistingDirectory);
  sub->add_option("--text", a->text, "text file (its bytes are the tokens)")
      ->required()->check(CLI::ExistingFile);
  sub->add_option("--tokens", a->tokens, "use the first N bytes of the text (0 = all; else at "
                                         "least 2: a window needs 2 tokens)")
      ->check(tokens_validator());
  sub->add_option("--windows", a->windows,
                  "W: split the text into W consecutive windows decoded as one batch")
      ->check(in_range(int64_t(1), int64_t(1) << 20));
  comma_list(sub->add_option("--state", a->states,
                  "state modes to evaluate, comma-separated: fp32 (= fp32/fp32), split modes "
                  "recurrence/read (fp32/bf16, fp32/fp16, fp16sr/fp16sr, fp32/nvfp4, "
                  "fp16sr/nvfp4, fp8/nvfp4, fp32/fp8), shared baselines shared-fp16, shared-bf16, "
                  "shared-fp8, shared-nvfp4; on CUDA also bf16, fp16 (16-bit state); there "
                  "the modes without kernels of their own run emulated: the mode's values over "
                  "float32 storage (the report names them)"));
  sub->add_option("--ssm", a->ssm, "SSM decoding of the evaluated modes: auto (shared-* "
                                   "conventional, the others replay), replay or conventional "
                                   "(the fp32 reference: --reference)")
      ->check(CLI::IsMember({"auto", "conventional", "replay"}));
  sub->add_option("--reference", a->reference,
                  "SSM decoding of the fp32 reference: conventional or replay (at the "
                  "modes' L: on CUDA this leaves out the engine's own replay-vs-conventional "
                  "difference, which its bf16 activations make ~1e-6..1e-5 in KL)")
      ->check(CLI::IsMember({"conventional", "replay"}));
  auto* ring = sub->add_option("-L,--ring", a->ring, "ReplaySSM ring length L (1..64; 0 = the "
                                                   "dispatcher's choice)")
                   ->check(in_range(0, 64));
  sub->add_option("--device", a->device, "cpu, cuda or auto (cuda when a CUDA device is present)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  sub->add_option("--json", a->json_out,
                  "write the results as JSON (DESIGN.md §4, bench \"kl\"; missing folders "
                  "are created)")
      ->check(non_empty());
  comma_list(sub->add_option("--buckets", a->buckets,
                  "upper edges of the position buckets, comma-separated and increasing "
                  "(positions past the last form one more)"))
      ->check(CLI::Validator(
          [](std::string& s) {
            // Whole-word integers only: atoll read "5abc" as 5 (then CLI11's own conversion
            // failed) and clamped 99999999999999999999 to 2^63 - 1.
            constexpr int64_t kMaxEdge = int64_t{1} << 40;
            // Spaces around an edge ("1024, 4096") are trimmed, as --state's names are.
            const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
            s = b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
            int64_t v = 0;
            const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
            if (ec != std::errc() || end != s.data() + s.size() || v < 1 || v > kMaxEdge)
              return "bucket edge '" + s + "' is not a position, expected an integer in [1, " +
                     std::to_string(kMaxEdge) + "]";
            return std::string();
          },
          "positive"));
  sub->add_option("--commit", a->commit, "commit recorded in the JSON (default: git rev-parse "
                                         "HEAD in the working directory)");
  add_threads_option(*sub);
  sub->callback([&action, a, ring] {
    a->ring_given = ring->count() > 0;
    action = [a] { return run_eval(*a); };
  });
}

}  // namespace replayssm::cli
