/// \file canopy_ReplayEngine.hpp
/// \brief Replays verify steps through designs as a serving graph runner would: batches padded to
/// the next captured bucket, metadata copied into static buffers, one graph per bucket after an
/// eager warm-up; sampled steps checked against the fp64 reference.
#pragma once

#include "canopy_ExperimentConfig.hpp"
#include "canopy_Results.hpp"
#include "canopy_StepSource.hpp"

#include <functional>
#include <memory>
#include <vector>

namespace canopy
{
/// \brief Progress callback: (work units done, total).
using ProgressFn = std::function<void(int64_t, int64_t)>;

/// \brief Runs every (input, design, option combination) of the config and returns the rows with
/// speedups and the environment block filled in. Throws InputError for a bad trace or shape.
ResultSet runExperiment(ExperimentConfig const &config, ProgressFn const &progress = {});
/// \brief The same over \p sources, the config's inputs as makeSources(config) made them (a caller that
/// already opened the traces, e.g. to check their memory, passes them on instead of opening them again).
ResultSet runExperiment(ExperimentConfig const &config, std::vector<std::unique_ptr<StepSource>> const &sources,
                        ProgressFn const &progress = {});

/// \brief Whether step \p step is checked at \p rate: a seeded hash, so the same steps are checked
/// on every run and for every design.
bool stepChecked(uint64_t seed, int64_t step, double rate);
} // namespace canopy
