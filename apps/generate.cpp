// `replayssm generate`: decode prompts with a Hugging Face hybrid checkpoint (engine/), streaming
// the text of a single prompt, reporting tokens/s, and with --compare running conventional and
// ReplaySSM decoding side by side and reporting the first position where they diverge.
#include <fmt/core.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.h"
#include "cli_checks.h"
#include "cli_words.h"
#include "commands.h"
#include "cuda/device.h"
#include "progress.h"
#include "replayssm/engine/checkpoint.h"
#include "replayssm/engine/config.h"
#include "replayssm/engine/model.h"
#include "replayssm/engine/serve.h"
#include "replayssm/engine/speculative.h"
#include "replayssm/engine/tokenizer.h"
#include "replayssm/errors.h"
#include "replayssm/precision.h"
#include "threads.h"

namespace replayssm::cli {
namespace {

struct GenerateOptions {
  std::string model, prompts_file, prompt_ids, device = "auto", ssm = "auto", state = "fp32";
  std::vector<std::string> prompts;
  int max_new_tokens = 64, ring = 16, batch = 8, max_context = 2048;
  double temperature = 0.0, top_p = 1.0, dt_floor = 0.0;
  int top_k = 0;
  uint64_t seed = 0;
  bool compare = false, quiet = false;
  bool ring_given = false;  ///< -L was on the command line (not its default)
  int speculate = 0;                          ///< T (1..8); 0: no speculative decoding
  std::string drafter = "ngram", spec_mode = "replay";
};

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    // Digits only, within int32: no sign, spaces or silent wrap-around.
    const bool digits = !tok.empty() && tok.size() <= 10 &&
                        tok.find_first_not_of("0123456789") == std::string::npos;
    check<ConfigError>(digits && std::stoll(tok) <= INT32_MAX, "'", tok,
                       "' is not a token id (0..", INT32_MAX, ")");
    ids.push_back(static_cast<int32_t>(std::stoll(tok)));
  }
  return ids;
}

std::vector<engine::Request> make_requests(const GenerateOptions& o, bool bytes) {
  std::vector<engine::Request> reqs;
  std::vector<std::string> texts = o.prompts;
  if (!o.prompts_file.empty()) {
    std::ifstream f(o.prompts_file);
    check<ConfigError>(f.good(), "--prompts: cannot read '", o.prompts_file, "'");
    for (std::string line; std::getline(f, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF files
      if (line.find_first_not_of(" \t") != std::string::npos) texts.push_back(line);  // skip blank
    }
  }
  if (!texts.empty())
    check<ConfigError>(bytes, "this checkpoint's vocabulary is not byte-level: pass token ids "
                              "with --prompt-ids (no tokenizer.json reader yet)");
  for (const auto& t : texts) {
    check<ConfigError>(!t.empty(), "--prompt: request ", reqs.size(), " is empty");
    reqs.push_back({engine::byte_encode(t), o.max_new_tokens});
  }
  if (!o.prompt_ids.empty()) reqs.push_back({parse_ids(o.prompt_ids), o.max_new_tokens});
  check<ConfigError>(o.prompts_file.empty() || !reqs.empty(), "--prompts: '", o.prompts_file,
                     "' has no prompt (one per line; blank lines are skipped)");
  check<ConfigError>(!reqs.empty(), "no prompt: give --prompt, --prompts or --prompt-ids");
  for (size_t i = 0; i < reqs.size(); ++i)  // the engine checks it too, without the flag's name
    check<ConfigError>(
        static_cast<int64_t>(reqs[i].prompt.size()) + o.max_new_tokens <= o.max_context,
        "request ", i, ": prompt (", reqs[i].prompt.size(), " token",
        cli::plural_s(static_cast<int64_t>(reqs[i].prompt.size())), ") + -n (", o.max_new_tokens,
        ") exceeds --max-context ", o.max_context,
        o.max_context < (1 << 20) ? " (raise it, up to 1048576, or lower -n)" : " (lower -n)");
  return reqs;
}

struct Run {
  std::vector<engine::Completion> out;
  engine::ServeStats stats;
  engine::SpecStats spec;
  int ring = 0;  ///< the ring length the model ran with (after the dispatcher's choice)
};

/// The report's rate: tokens per second after the first step, or what stands in for it where a run
/// had no step after its first (-n 1: the first step's rate would mix in loading and warm-up).
std::string steady_rate(const engine::ServeStats& s) {
  if (s.steps <= 1)
    return fmt::format("one step ({:.0f} ms), no rate after it", 1e3 * s.first_step_seconds);
  // Prompt tokens count: the engine feeds them through the same decode steps (one per row and
  // step, or T at a time with --speculate).
  return fmt::format("{:.1f} tokens/s (prompt and generated) after the first step ({:.0f} ms)",
                     s.steady_tokens_per_s(), 1e3 * s.first_step_seconds);
}

/// Rows decoded at once: --batch (default 8), never more than there are requests (each row holds
/// a slot with its KV cache and states).
int batch_size(const GenerateOptions& o, size_t requests) {
  return static_cast<int>(std::max<size_t>(1, std::min(static_cast<size_t>(o.batch), requests)));
}

Run run_once(const GenerateOptions& o, engine::SsmMode mode, const std::vector<engine::Request>& reqs,
             bool bytes, bool stream) {
  engine::ModelOptions mo;
  mo.cuda = o.device == "cuda";
  mo.ssm = mode;
  mo.ring_L = o.ring;
  mo.state = o.state;
  mo.max_context = o.max_context;
  const int batch = batch_size(o, reqs.size());
  mo.max_slots = batch;
  mo.dt_floor = o.dt_floor;
  mo.spec_T = o.speculate;
  auto model = engine::Model::load(o.model, mo);
  std::unique_ptr<engine::Drafter> drafter;
  if (o.speculate > 0) drafter = engine::make_drafter(o.drafter, *model);
  engine::SamplingParams sp{o.temperature, o.top_k, o.top_p, o.seed};
  Run r;
  r.ring = model->options().ring_L;
  // The prompt is echoed with the first generated token (or after a run that generates none), so
  // a request the engine rejects prints nothing but its error.
  bool echoed = false;
  auto echo = [&] {
    if (!stream || echoed) return;
    echoed = true;
    if (bytes) {  // every byte, NUL included (fputs would stop at one)
      const std::string text = engine::byte_decode(reqs[0].prompt);
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
    else
      for (int32_t t : reqs[0].prompt) std::printf("%d ", t);
  };
  Progress bar(fmt::format("decoding ({})", engine::ssm_mode_name(mode)), long(reqs.size()));
  auto on_token = [&](size_t, int32_t t) {
    if (!stream) return;
    echo();
    if (bytes) std::fputc(t, stdout); else std::printf(" %d", t);
    std::fflush(stdout);
  };
  size_t shown = 0;
  auto on_step = [&](size_t done, size_t) {
    if (stream || done == shown) return;
    bar.tick(long(done - shown));
    shown = done;
  };
  if (o.speculate > 0)
    r.out = engine::serve_speculative(*model, reqs, batch, sp, {o.speculate, drafter.get()},
                                      &r.stats, &r.spec, on_token, on_step);
  else
    r.out = engine::serve(*model, reqs, batch, sp, &r.stats, on_token, on_step);
  echo();
  bar.done();
  return r;
}

/// Where free-running conventional and ReplaySSM decoding pick different greedy tokens a and b
/// after the same prefix: the two tokens' logit gap in the conventional model, fed the prompt and
/// the shared prefix teacher-forced, relative to the largest |logit| there. A gap within the
/// engine's rounding (a near-tie) explains the split; a larger one is a real divergence.
double relative_gap(const GenerateOptions& o, const std::vector<int32_t>& prompt,
                    const std::vector<int32_t>& prefix, int32_t a, int32_t b) {
  engine::ModelOptions mo;
  mo.cuda = o.device == "cuda";
  mo.ssm = engine::SsmMode::kConventional;
  mo.max_slots = 1;
  mo.max_context = static_cast<int32_t>(prompt.size() + prefix.size());
  mo.dt_floor = o.dt_floor;
  auto m = engine::Model::load(o.model, mo);
  m->reset(std::vector<int32_t>{0});
  std::vector<float> logits(m->config().vocab_size);
  std::vector<int32_t> feed = prompt;
  feed.insert(feed.end(), prefix.begin(), prefix.end());
  for (int32_t t : feed) m->step(std::vector<int32_t>{t}, std::vector<int32_t>{0}, logits);
  float scale = 0;
  for (float v : logits) scale = std::max(scale, std::fabs(v));
  return std::fabs(logits[a] - logits[b]) / std::max(scale, 1e-30f);
}

int generate(const GenerateOptions& o) {
  GenerateOptions opt = o;
  // auto: the CUDA engine when a CUDA device is present and the engine runs the checkpoint there
  // (sizes, block kinds), else the CPU; the report line names the device used.
  const bool auto_device = opt.device == "auto";
  if (auto_device) opt.device = cuda::device_count() > 0 ? "cuda" : "cpu";
  // Peek at the vocabulary (config.json only) to decide between text and token ids.
  const bool bytes =
      engine::parse_config_of(engine::Checkpoint::open(opt.model)).vocab_size == 256;
  const auto reqs = make_requests(opt, bytes);
  const bool stream = reqs.size() == 1 && !opt.quiet;
  // auto: shared state baselines (shared-*) decode conventionally, everything else with ReplaySSM.
  if (opt.ssm == "auto") opt.ssm = opt.state.rfind("shared-", 0) == 0 ? "conventional" : "replay";
  auto mode = opt.ssm == "replay" ? engine::SsmMode::kReplay : engine::SsmMode::kConventional;
  if (opt.speculate > 0) {
    // The speculative mode decides how the SSM layers run: ReplaySSM verify, or the peers'
    // snapshot baseline on conventional states.
    check<ConfigError>(!opt.compare, "--compare runs without --speculate (compare the "
                                     "speculative modes with --spec-mode replay / snapshot)");
    check<ConfigError>(o.ssm == "auto", "--ssm ", o.ssm, " with --speculate: the SSM layers run "
                       "as --spec-mode says (replay or snapshot)");
    mode = opt.spec_mode == "replay" ? engine::SsmMode::kReplay : engine::SsmMode::kConventional;
    // The ring holds the committed history and T drafts (ring.h): named here by its flags.
    check<ConfigError>(mode != engine::SsmMode::kReplay || opt.ring == 0 ||
                           opt.ring >= 2 * opt.speculate,
                       "-L ", opt.ring, ": speculative decoding with -T ", opt.speculate,
                       " needs L >= 2T = ", 2 * opt.speculate,
                       " (the committed history plus T drafts), or -L 0 for the dispatcher's L");
  }
  // -L is the ring length of ReplaySSM decoding: a run with no replay in it would drop it silently.
  if (o.ring_given && mode != engine::SsmMode::kReplay && !opt.compare)
    throw ConfigError(fmt::format(
        "-L {}: the ring length of ReplaySSM decoding, but the SSM layers decode without a ring "
        "here ({}): drop -L, or {}",
        o.ring,
        opt.speculate > 0            ? "--spec-mode snapshot"
        : o.ssm == "conventional"    ? "--ssm conventional"
                                     : "'" + opt.state + "' decodes conventionally",
        opt.speculate > 0 ? std::string("--spec-mode replay")
                          : o.ring == 0 ? std::string("add --compare to run ReplaySSM at the "
                                                      "dispatcher's L beside it")
                                        : fmt::format("add --compare to run ReplaySSM at L {} "
                                                      "beside it", o.ring)));

  Run main_run;
  try {
    main_run = run_once(opt, mode, reqs, bytes, stream);
  } catch (const UnsupportedError& e) {
    if (!auto_device || opt.device != "cuda") throw;
    fmt::print(stderr, "replayssm: note: {}; decoding on the CPU\n", e.what());
    opt.device = "cpu";
    main_run = run_once(opt, mode, reqs, bytes, stream);
  }
  if (stream) std::printf("\n");
  if (!stream && !opt.quiet) {
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (bytes)
        fmt::print("[{}] {}{}\n", i, engine::byte_decode(reqs[i].prompt),
                   engine::byte_decode(main_run.out[i].tokens));
      else {
        fmt::print("[{}]", i);
        for (int32_t t : main_run.out[i].tokens) fmt::print(" {}", t);
        fmt::print("\n");
      }
    }
  }
  const auto& s = main_run.stats;
  // fp16sr recurrences: their L = 1 step writes the float16 checkpoint with stochastic rounding
  // every step (slower than the fp32 conventional step on the CPU), not the fp32 one.
  const char* sr16_step = opt.state.rfind("fp16sr/", 0) == 0
                              ? " over the float16 state, rounded stochastically every step"
                              : "";
  fmt::print("{}: {} request{}, {} prompt + {} generated token{} in {} step{}, {:.2f} s: {} "
             "(device {}, ssm {}{}, batch {}{})\n",
             opt.model, reqs.size(), plural_s(static_cast<int64_t>(reqs.size())), s.prompt_tokens,
             s.generated_tokens, plural_s(s.generated_tokens), s.steps, plural_s(s.steps),
             s.seconds,
             steady_rate(s), opt.device,
             opt.speculate > 0 ? opt.spec_mode : opt.ssm,
             // The ring length only where the SSM layers replay (conventional and snapshot steps
             // have none); ReplaySSM at L = 1, where the dispatcher (-L 0) chose it, is the
             // conventional step.
             mode != engine::SsmMode::kReplay ? std::string()
             : opt.speculate == 0 && opt.ring == 0 && main_run.ring == 1
                 ? std::string(", L 1 = the conventional step") + sr16_step
                 : ", L " + std::to_string(main_run.ring),
             batch_size(opt, reqs.size()),
             opt.state == "fp32" || opt.state == "fp32/fp32" ? "" : ", state " + opt.state);
  // A split mode (recurrence/read) at L = 1 flushes every step: its read copy is never read
  // (fp16sr/fp16sr has none: its ordinary steps read the checkpoint).
  const bool split = opt.state.find('/') != std::string::npos && opt.state != "fp32/fp32" &&
                     opt.state != "fp16sr/fp16sr";
  if (split && main_run.ring == 1 && opt.speculate == 0 && opt.ssm != "conventional")
    fmt::print("note: at L = 1 every step is a flush, so the {} read copy is never read (each "
               "step folds its token into the checkpoint); {}\n",
               opt.state,
               opt.ring == 0 ? "the dispatcher chose L = 1 for this batch, -L 16 forces replay"
                             : "use -L >= 2 to read it");
  if (opt.speculate > 0) {
    const auto& sp = main_run.spec;
    if (sp.row_steps == 0)  // every token came from the prompt's step: no verify step ran
      fmt::print("speculative: T {}, drafter {}, {} mode: no verify step ran (-n 1)\n",
                 opt.speculate, opt.drafter, opt.spec_mode);
    else
      fmt::print("speculative: T {}, drafter {}, {} mode: mean accepted {:.2f} tokens per step "
                 "(1..{}), {} of {} draft{} kept ({:.0f}%), drafting {:.2f} s\n",
                 opt.speculate, opt.drafter, opt.spec_mode, sp.mean_accepted(), opt.speculate,
                 sp.accepted_drafts, sp.drafted, plural_s(sp.drafted),
                 100 * sp.draft_acceptance(), sp.draft_seconds);
    if (opt.speculate == 1)
      fmt::print("note: --speculate 1 drafts nothing: each verify step feeds the last accepted "
                 "token alone (plain decoding through the verify path); use 2..8 to draft\n");
  }
  if (!opt.compare) return 0;

  const auto other = mode == engine::SsmMode::kReplay ? engine::SsmMode::kConventional
                                                      : engine::SsmMode::kReplay;
  // A split or shared state mode is compared with the fp32 state run the other way (a split mode
  // does not run conventionally, nor a shared one with ReplaySSM).
  const bool sixteen = opt.state == "bf16" || opt.state == "fp16";
  GenerateOptions cmp_opt = opt;
  if (!sixteen) cmp_opt.state = "fp32";
  Run cmp = run_once(cmp_opt, other, reqs, bytes, false);
  const bool replay_main = mode == engine::SsmMode::kReplay;
  const auto& conv = replay_main ? cmp : main_run;
  const auto& rep = replay_main ? main_run : cmp;
  // Only the fp32 state (fp32/fp32), or a ring of 1 (ReplaySSM then runs the conventional
  // kernel) over a recurrence the comparison shares (fp32, or the same 16-bit state), makes the
  // two runs the same arithmetic up to summation order; any other state rounds differently in the
  // two modes (a read copy, a shared low-precision state, a 16-bit state rounded every step
  // conventionally but at each flush with ReplaySSM, an fp16sr / fp8 checkpoint against the fp32
  // one), so a divergence then measures the state's rounding: reported with the states named,
  // not an error.
  const StateMode rep_mode = sixteen ? StateMode{} : parse_state_mode(opt.state);
  const bool exact = (rep.ring == 1 && rep_mode.recurrence == StateFormat::kFp32) ||
                     (!sixteen && rep_mode.is_default());
  const std::string conv_state = replay_main ? cmp_opt.state : opt.state;
  const std::string rep_state = replay_main ? opt.state : cmp_opt.state;
  const std::string conv_name =
      exact ? "conventional"
            : sixteen ? fmt::format("conventional ({} state rounded every step)", conv_state)
                      : fmt::format("conventional (state {})", conv_state);
  const std::string rep_name =
      exact ? "ReplaySSM"
            : sixteen ? fmt::format("ReplaySSM ({} checkpoint rounded at each flush)", rep_state)
                      : fmt::format("ReplaySSM (state {})", rep_state);
  // The CPU engine computes in float32: the two modes differ by summation order only (~1e-6 of
  // the logits). The CUDA engine rounds activations to bf16 before its GEMMs, which turns those
  // differences into ~1e-3-1e-2 of the logits (6.2e-3 measured, tests/engine/test_model_cuda.cpp).
  const double tie = opt.device == "cuda" ? 2e-2 : 1e-4;
  size_t diverged = 0, ties = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& a = conv.out[i].tokens;
    const auto& b = rep.out[i].tokens;
    size_t p = 0;
    while (p < a.size() && p < b.size() && a[p] == b[p]) ++p;
    if (p == a.size() && p == b.size()) continue;
    if (opt.temperature == 0 && p < a.size() && p < b.size()) {
      const double gap = relative_gap(opt, reqs[i].prompt, {a.begin(), a.begin() + p}, a[p], b[p]);
      if (gap <= tie) {
        ++ties;
        fmt::print("request {}: {} and {} split at generated token {} on a near-tie (logit gap "
                   "{:.1e} of the largest logit, within rounding {:.0e})\n",
                   i, conv_name, rep_name, p, gap, tie);
        continue;
      }
      fmt::print("request {}: {} and {} diverge at generated token {} (logit gap {:.1e} of the "
                 "largest logit, beyond rounding {:.0e})\n", i, conv_name, rep_name, p, gap, tie);
    } else {
      fmt::print("request {}: {} and {} diverge at generated token {}\n", i, conv_name, rep_name,
                 p);
    }
    ++diverged;
  }
  fmt::print("compare: conventional {}, ReplaySSM (L {}) {}; ", steady_rate(conv.stats),
             rep.ring, steady_rate(rep.stats));
  if (diverged == 0 && ties == 0)
    fmt::print("{} and {} decoding agree on {}\n", conv_name, rep_name,
               conv.stats.generated_tokens == 1
                   ? std::string("the one generated token")
                   : fmt::format("all {} generated tokens", conv.stats.generated_tokens));
  else if (diverged == 0)
    fmt::print("{} and {} decoding agree up to {} near-tie split{} within rounding\n", conv_name,
               rep_name, ties, plural_s(static_cast<int64_t>(ties)));
  else
    fmt::print("{} of {} request{} diverged\n", diverged, reqs.size(),
               plural_s(static_cast<int64_t>(reqs.size())));
  if (rep.ring == 1)
    fmt::print("compare: ReplaySSM ran with L 1{}, whose steps are the conventional kernel's{}: "
               "give -L 16 to compare the ring\n",
               opt.ring == 0 ? " (the dispatcher's choice at this batch)" : "",
               sr16_step);
  if (!exact && diverged > 0) {
    fmt::print("compare: the two runs round the state differently ({} against {}): the divergence "
               "measures that rounding, not ReplaySSM (compare with --state fp32)\n",
               conv_name, rep_name);
    return 0;
  }
  return diverged == 0 ? 0 : 3;
}

}  // namespace

void add_generate(CLI::App& app, Action& action) {
  auto* o = new GenerateOptions;  // lives as long as the app (the process)
  auto* sub = app.add_subcommand("generate", "generate text with a Hugging Face hybrid checkpoint");
  sub->option_defaults()->always_capture_default();  // --help shows every default
  sub->add_option("--model", o->model, "checkpoint directory (config.json + *.safetensors)")
      ->required()->check(CLI::ExistingDirectory);
  // One word per --prompt: quote a prompt with spaces (a stray word is an error, not a prompt).
  sub->add_option("--prompt", o->prompts, "prompt text (repeat for several requests)")
      ->allow_extra_args(false);
  sub->add_option("--prompts", o->prompts_file, "file with one prompt per line")
      ->check(CLI::ExistingFile);
  sub->add_option("--prompt-ids", o->prompt_ids, "prompt as comma-separated token ids")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            if (s.empty()) return "an empty value, expected comma-separated token ids";
            try {
              (void)parse_ids(s);
            } catch (const Error& e) {  // CLI11 puts the option's name in front
              return std::string(e.what());
            }
            return std::string();
          },
          "IDS"));
  sub->add_option("-n,--max-new-tokens", o->max_new_tokens, "tokens to generate per request")
      ->check(in_range(1, 1 << 20));
  sub->add_option("--device", o->device, "cpu, cuda or auto (cuda when a CUDA device is present)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  sub->add_option("--ssm", o->ssm, "SSM decoding: conventional, replay or auto (default: "
                                   "conventional for shared-* state modes, else replay)")
      ->check(CLI::IsMember({"auto", "conventional", "replay"}));
  auto* ring = sub->add_option("-L,--ring", o->ring,
                                "ReplaySSM ring length L (1..64; 0 = the dispatcher's choice)")
                   ->check(in_range(0, 64));
  sub->add_option("--state", o->state, "SSM state mode: fp32 (default), a split mode "
                                       "recurrence/read (fp32/bf16, fp32/nvfp4, fp16sr/nvfp4, "
                                       "...: replay), shared-fp16|bf16|fp8|nvfp4 (conventional); "
                                       "CUDA: bf16, fp16, and fp32/bf16, fp32/fp16, fp32/fp8, "
                                       "fp32/nvfp4, fp16sr/fp16sr, fp16sr/nvfp4 (Mamba-2 and GDN layers)");
  sub->add_option("--batch", o->batch, "requests decoded at once (at most the number of requests)")
      ->check(in_range(1, 4096));
  sub->add_option("--max-context", o->max_context, "tokens per sequence")->check(in_range(1, 1 << 20));
  sub->add_option("--temperature", o->temperature, "0 = greedy")
      ->check(in_range(0.0, 100.0));
  sub->add_option("--top-k", o->top_k, "keep the k most likely tokens (0 = all)")->check(in_range(0, 1 << 30));
  sub->add_option("--top-p", o->top_p, "nucleus mass (1 = all)")->check(in_range(1e-6, 1.0));
  sub->add_option("--seed", o->seed, "sampling seed (0 .. 2^64 - 1)")->check(seed_validator());
  sub->add_option("--dt-floor", o->dt_floor, "Mamba-2: clamp dt from below after softplus (0 = off)")
      ->check(in_range(0.0, 1.0));
  sub->add_flag("--compare", o->compare, "also run the other SSM mode and report divergence");
  auto* spec = sub->add_option("-T,--speculate", o->speculate,
                  "speculative decoding: T tokens per verify step (1..8; last token + T-1 "
                  "drafts, so T = 1 drafts nothing)")
      ->check(in_range(1, 8))
      ->default_str("off");
  sub->add_option("--drafter", o->drafter,
                  "with --speculate: ngram (prompt lookup) or model:DIR (a draft model with the "
                  "same vocabulary, greedy)")
      ->check(drafter_spec())
      ->needs(spec);
  sub->add_option("--spec-mode", o->spec_mode,
                  "with --speculate: replay (ReplaySSM verify) or snapshot (the peers' baseline: "
                  "one state snapshot per draft token)")
      ->check(CLI::IsMember({"replay", "snapshot"}))
      ->needs(spec);
  sub->add_flag("-q,--quiet", o->quiet, "print only the report lines");
  add_threads_option(*sub);
  sub->callback([&action, o, ring, sub] {
    o->ring_given = ring->count() > 0;
    // Greedy decoding draws nothing: sampling options given with it would be dropped silently.
    if (o->temperature == 0.0 &&
        sub->count("--top-k") + sub->count("--top-p") + sub->count("--seed") > 0)
      std::fprintf(stderr, "replayssm: note: --top-k, --top-p and --seed shape sampling "
                           "(--temperature > 0); at --temperature 0 decoding is greedy\n");
    action = [o] { return generate(*o); };
  });
}

}  // namespace replayssm::cli
