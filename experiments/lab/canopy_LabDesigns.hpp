/// \file canopy_LabDesigns.hpp
/// \brief Design variants kept for measurement only, registered (as experimental: by name, never
/// in "all" or the default lists) by the measuring tools, not by the designs' library.
#pragma once

namespace canopy
{
/// \brief Registers `cuda-sm120-bf16p` (cuda-sm120 with bf16 split partials, the measured and
/// rejected alternative to fp32 partials, docs/results/cuda-h200.md). Idempotent.
void registerLabDesigns();
/// \brief Removes what registerLabDesigns added (tests leave no design registered behind them).
void unregisterLabDesigns();
} // namespace canopy
