// The oracle: a scalar float64 implementation of every op, written from the math of DESIGN.md §2
// for one sequence and one layer at a time. Slow and obvious on purpose: every backend and kernel
// is tested against it. Nothing here is optimised; replay outputs are defined by materialising the
// state from the checkpoint and the ring records and then taking the conventional step.
#pragma once
#include <cstdint>
#include <vector>

#include "replayssm/precision.h"
#include "replayssm/ring.h"

namespace replayssm::ref {

using Vec = std::vector<double>;

double softplus(double x);  ///< log(1 + e^x), x itself above 20 (the kernels' threshold)
double sigmoid(double x);

// ---- ring cursor protocol (written independently of ring.h's inline helpers) -----------------

/// Physical ring row of logical position l for cursor c.
int64_t ring_row(const Cursor& c, int64_t l, const RingConfig& cfg);
/// The cursor after a step whose row accepted n tokens.
Cursor commit(const Cursor& c, int32_t n, const RingConfig& cfg);
/// The cursor of a fresh slot.
Cursor reset(const RingConfig& cfg);

// ---- state precision modes (precision.h) --------------------------------------------------------
// A sequence's state in a mode other than fp32/fp32: S0 holds the *decoded* checkpoint and
// `read` the decoded read copy. Split-mode flushes fold from S0 in float64, take y from the new
// state, then set S0 = quantize(recurrence, S) (fp32: rounded to float32, as the backends store
// it) and read = quantize(read format, S0), the copy of the checkpoint as stored (fp16sr/fp16sr:
// read = S0).
// Ordinary steps materialise from `read` instead of S0. Shared baselines: the conventional step on
// the decoded state, re-quantised every step.

/// The SR key of one slot's write: seed, slot id and the slot's step counter.
struct SrKeyRef {
  uint64_t seed = 0;
  uint32_t slot = 0;
  uint32_t step = 0;
};
/// float16 round to nearest even of x, saturating at +-65504 (NaN kept).
double f16_round(double x);
/// The storage rounding of a state [heads * rows * n] in format f, decoded back: every value is
/// rounded to float32, then encoded (nvfp4: one group per head, blocks along n; fp8: one scale
/// per row; fp16sr: element e of the slot draws sr_word(seed, slot, step, e)) and decoded.
Vec quantize_state(StateFormat f, const Vec& S, int64_t heads, int64_t rows, int64_t n,
                   const SrKeyRef& key = {});

/// What a sequence keeps beyond S0 in a non-default mode.
struct ModeState {
  StateMode mode{};     ///< default fp32/fp32: nothing below is used
  Vec read;             ///< decoded read copy (split modes)
  SrKeyRef sr;          ///< seed, slot; step counts SR writes (each write uses it, then ++)
};

// ---- Mamba-2 ----------------------------------------------------------------------------------

struct Mamba2Params {
  int64_t H = 0, P = 0, N = 0, G = 0;
  Vec A_log, dt_bias, D;  ///< [H] each; D empty = no skip
  bool dt_softplus = true;
};
struct Mamba2Token {
  Vec x;   ///< [H*P]
  Vec dt;  ///< [H] raw
  Vec B;   ///< [G*N]
  Vec C;   ///< [G*N]
  Vec z;   ///< [H*P] or empty
};
struct Mamba2Record {
  Vec x;      ///< [H*P]
  Vec delta;  ///< [H] processed (softplus(dt + dt_bias))
  Vec B;      ///< [G*N]
};
/// One sequence's replay cache for one layer: checkpoint, R physical ring rows, its cursor.
struct Mamba2Seq {
  Vec S0;                          ///< [H*P*N]
  std::vector<Mamba2Record> ring;  ///< R rows
  Cursor cursor;
  ModeState prec{};                ///< state mode (default fp32/fp32)
};

Mamba2Seq mamba2_new_seq(const Mamba2Params& p, const RingConfig& cfg);
/// delta for head h of a token.
double mamba2_delta(const Mamba2Params& p, const Mamba2Token& t, int64_t h);
/// Conventional step: updates state [H*P*N] in place, returns y [H*P].
Vec mamba2_conventional_step(const Mamba2Params& p, Vec& state, const Mamba2Token& t);
/// The state after folding logical records 0..n-1 of seq into its checkpoint (not stored).
Vec mamba2_materialize(const Mamba2Params& p, const RingConfig& cfg, const Mamba2Seq& s, int64_t n);
/// ReplaySSM decode step (decode mode): per seq.cursor.is_flush either folds history + token into
/// S0 or appends the token's record at logical h. Returns y [H*P]. The cursor is not advanced.
Vec mamba2_replay_step(const Mamba2Params& p, const RingConfig& cfg, Mamba2Seq& s,
                       const Mamba2Token& t);
/// Conventional step of a shared baseline (prec.mode.shared): state holds the decoded state;
/// updated in float64, y from the new state, then state = quantize(format, state).
Vec mamba2_conventional_step_shared(const Mamba2Params& p, Vec& state, ModeState& prec,
                                    const Mamba2Token& t);
/// Speculative verify: appends the tokens' records at logical h.., returns their outputs from the
/// same checkpoint, folds the committed history into S0 on a flush step. Cursor not advanced.
std::vector<Vec> mamba2_verify(const Mamba2Params& p, const RingConfig& cfg, Mamba2Seq& s,
                               const std::vector<Mamba2Token>& tokens);
/// The closed form of DESIGN.md §2 for the ordinary step (y_p from S0 and records 0..p), used to
/// check the algebra the fast backends rely on. Does not modify s.
Vec mamba2_replay_closed_form(const Mamba2Params& p, const RingConfig& cfg, const Mamba2Seq& s,
                              const Mamba2Token& t);

// ---- Gated DeltaNet / KDA -----------------------------------------------------------------------

struct GdnParams {
  int64_t H = 0, HV = 0, K = 0, V = 0;
  bool kda = false;     ///< per-channel gate (KDA) instead of a scalar per value head (GDN)
  Vec A_log;            ///< [HV]
  Vec dt_bias;          ///< [HV] (GDN) or [HV*K] (KDA)
  double scale = 0.0;   ///< 0: K^-1/2
  bool beta_bf16 = false;
};
struct GdnToken {
  Vec q, k;  ///< [H*K] raw
  Vec v;     ///< [HV*V]
  Vec a;     ///< [HV] (GDN) or [HV*K] (KDA)
  Vec b;     ///< [HV]
};
struct GdnRecord {
  Vec u;     ///< [HV*V]
  Vec k;     ///< [H*K] normalised
  Vec g;     ///< [HV] (GDN) or [HV*K] (KDA)
  Vec v;     ///< [HV*V] raw v (split-mode flushes recompute u from it)
  Vec beta;  ///< [HV]
};
struct GdnSeq {
  Vec S0;                       ///< [HV*V*K]
  std::vector<GdnRecord> ring;  ///< R rows
  Cursor cursor;
  ModeState prec{};             ///< state mode (default fp32/fp32)
};

GdnSeq gdn_new_seq(const GdnParams& p, const RingConfig& cfg);
Vec gdn_conventional_step(const GdnParams& p, Vec& state, const GdnToken& t);
/// Conventional step of a shared baseline, as mamba2_conventional_step_shared.
Vec gdn_conventional_step_shared(const GdnParams& p, Vec& state, ModeState& prec, const GdnToken& t);
Vec gdn_materialize(const GdnParams& p, const RingConfig& cfg, const GdnSeq& s, int64_t n);
Vec gdn_replay_step(const GdnParams& p, const RingConfig& cfg, GdnSeq& s, const GdnToken& t);
std::vector<Vec> gdn_verify(const GdnParams& p, const RingConfig& cfg, GdnSeq& s,
                            const std::vector<GdnToken>& tokens);
/// The output-only closed form (method.md §3.3(a)): y of the ordinary step from S0 and the ring
/// records without forming the state. Does not modify s.
Vec gdn_replay_closed_form(const GdnParams& p, const RingConfig& cfg, const GdnSeq& s,
                           const GdnToken& t);
/// The UT/WY chunk form of verify (method.md §4.4) over the tokens, for checking the algebra.
std::vector<Vec> gdn_verify_chunk_form(const GdnParams& p, const RingConfig& cfg, const GdnSeq& s,
                                       const std::vector<GdnToken>& tokens);

}  // namespace replayssm::ref
