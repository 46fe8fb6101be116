/// \file canopy_TraceSimulator.hpp
/// \brief A small serving simulation that produces DDTree verify traces, deterministic for a seed:
/// request arrivals, a token-granular KV slot allocator (free list as in SGLang's pool, optional
/// compaction), best-first DDTree growth over synthetic drafter marginals, and acceptance by walking
/// the tree against a synthetic target.
#pragma once

#include "canopy_Trace.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace canopy
{
class SplitMix64;

/// \brief A distribution of token counts (prompt or output lengths).
struct LengthDistribution
{
  enum class Kind
  {
    kFixed,     ///< always `value`
    kUniform,   ///< uniform integer in [min, max]
    kLogNormal  ///< exp(N(log median, sigma)), rounded, clipped to [min, max]
  };
  Kind kind = Kind::kFixed;
  int64_t value = 1024;
  int64_t min = 1, max = 1 << 17;
  double median = 1024, sigma = 1.0;

  int64_t sample(SplitMix64 &rng) const;
  /// \brief Largest value it can produce.
  int64_t upperBound() const { return kind == Kind::kFixed ? value : max; }
};
template <>
struct EnumNames<LengthDistribution::Kind>
{
  using K = LengthDistribution::Kind;
  static constexpr char const *kind = "distribution";
  static constexpr std::array<std::pair<K, char const *>, 3> table{
      {{K::kFixed, "fixed"}, {K::kUniform, "uniform"}, {K::kLogNormal, "lognormal"}}};
};
inline LengthDistribution::Kind parseLengthKind(std::string const &name, std::string const &what)
{
  return parseEnum<LengthDistribution::Kind>(name, what);
}

struct SimulatorConfig
{
  uint64_t seed = 1;
  int64_t steps = 1000;        ///< verify steps recorded
  int64_t warmup_steps = 0;    ///< simulated first and not recorded (lets the pool reach steady churn)
  std::string source = "canopy trace synth";
  ModelShape shape;
  /// [model] kv_dtype: how the pool is stored (an FP8 dtype writes format v2; with /values the pool
  /// is quantised as the serving stack writes it, quantisePool).
  KvDtype kv_dtype = KvDtype::kBf16;
  /// [model] kv_scale: the per-tensor scale of fp8-e4m3 / fp8-e5m2 (SGLang's k_scale); not to be
  /// confused with values.kv_scale, the range of the seeded pool values.
  float kv_dtype_scale = 1.0f;

  // Arrivals: `fixed` keeps `concurrency` requests running (a new one arrives when one finishes);
  // `poisson` draws Poisson(rate) arrivals per step into a FIFO queue, at most `max_running` run.
  enum class Arrivals
  {
    kFixed,
    kPoisson
  };
  Arrivals arrivals = Arrivals::kFixed;
  int concurrency = 8;
  double rate = 0.25;          ///< requests per verify step (poisson)
  int max_running = 64;        ///< batch cap (poisson)
  LengthDistribution prompt{LengthDistribution::Kind::kLogNormal, 1024, 16, 16384, 1024, 1.0};
  LengthDistribution output{LengthDistribution::Kind::kLogNormal, 256, 16, 4096, 256, 0.8};

  // KV pool: token-granular slots [1, num_slots) (slot 0 is reserved for padding, as in SGLang).
  int64_t num_slots = 1 << 20;
  bool sort_free = false;      ///< merge and sort released slots when the free list runs short (SGLang need_sort)
  int64_t initial_run = 0;     ///< > 0: the pool starts fragmented, its free list in shuffled runs of this many slots
  int64_t compact_every = 0;   ///< defragment every N steps (0 = never), for A/B studies

  // Drafter (DDTree over a block-16 DFlash drafter): per-depth top-k marginals are sorted draws of
  // Dirichlet(alpha_top * depth_decay^(d-1), alpha_rest x (top_k - 1), alpha_tail); the tree is the
  // best-first expansion of the rank lattice by path probability: `budget` nodes plus the root, as
  // DDTree's Algorithm 1 (the root, the previous bonus token, does not count toward the budget).
  // The parameters below are the "chat" profile (drafterProfiles() lists the others).
  int budget = 32;
  int max_depth = 15;
  int top_k = 8;
  // Defaults calibrated (2000 steps, seed 1) to published DDTree/DFlash behaviour: mean accepted
  // length 5.98 at budget 32 (4.6 at 8, 6.6 at 64), and at the first departure from the drafter's
  // top-1 token the target takes the rank-1 sibling 36.9% of the time.
  double alpha_top = 16.0;
  double alpha_rest = 0.3;
  double alpha_tail = 0.45;
  double depth_decay = 0.95;

  // Target: at each depth, with probability `agreement` its token is drawn from the drafter's
  // marginal (rank r with probability q_d(r), off the list with the tail mass), else off the list.
  double agreement = 0.965;
  double sharpness = 1.0;  ///< the target's rank r has weight q(r)^sharpness (renormalised) instead of q(r)

  // Values for numerical replay: random q and pool (uniform in [-scale, scale]) and the expected
  // output, referenceAttention rounded to bf16. Large: q alone is N x H x 1152 bytes.
  bool values = false;
  uint64_t values_seed = 1;
  float q_scale = 1.0f, kv_scale = 1.0f;
};
template <>
struct EnumNames<SimulatorConfig::Arrivals>
{
  using A = SimulatorConfig::Arrivals;
  static constexpr char const *kind = "arrivals mode";
  static constexpr std::array<std::pair<A, char const *>, 2> table{{{A::kFixed, "fixed"}, {A::kPoisson, "poisson"}}};
};

/// \brief A named set of drafter and target parameters (top_k, alpha_*, depth_decay, agreement,
/// sharpness, max_depth), calibrated against published DDTree statistics (docs/trace-format.md says which).
struct DrafterProfile
{
  std::string name, calibration;
  int max_depth, top_k;
  double alpha_top, alpha_rest, alpha_tail, depth_decay, agreement, sharpness;
};
std::vector<DrafterProfile> const &drafterProfiles();
/// \brief Sets the drafter and target fields of \p config from the profile; InputError naming
/// \p key and the known names when there is none called \p name.
void applyDrafterProfile(SimulatorConfig &config, std::string const &name, std::string const &key = "draft.profile");

/// \brief Range checks; InputError naming the config key (e.g. "draft.budget") and its value.
void validateSimulatorConfig(SimulatorConfig const &config);

/// \brief What the simulation saw (over the recorded steps).
struct SimulatorSummary
{
  int64_t steps = 0, rows = 0, nodes = 0, prefix_tokens = 0;
  int64_t admitted = 0, finished = 0, retracted = 0, compactions = 0;
  double mean_batch = 0, mean_accepted = 0;
  double rank1_at_first_mismatch = 0;  ///< of walks where the target left the drafter's top-1 token, share that took rank 1
  double mean_run_length = 0;          ///< fragmentation: mean run of consecutive slots in prefixes
  int64_t peak_used_slots = 0;
};

/// \brief Runs the simulation and returns the trace (valid by construction; validated by the writer).
TraceColumns simulateTrace(SimulatorConfig const &config, SimulatorSummary *summary = nullptr);

/// \brief Fills /values of \p columns: random q and pool (stored in the columns' kv_dtype with their
/// kv_scale, quantisePool), expected out = fp64 reference on the stored pool, rounded to bf16.
void addSyntheticValues(TraceColumns &columns, uint64_t seed, float q_scale = 1.0f, float kv_scale = 1.0f);
} // namespace canopy
