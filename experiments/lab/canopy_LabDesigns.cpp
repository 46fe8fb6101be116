#include "canopy_LabDesigns.hpp"

#include "canopy_CudaDesigns.hpp"
#include "canopy_Registry.hpp"

namespace canopy
{
namespace
{
char const *const SM120_BF16P = "cuda-sm120-bf16p";
}

void registerLabDesigns()
{
  registerBuiltinDesigns();  // first, so that the variant lists after the designs it varies
  registerDesign(SM120_BF16P,
                 "cuda-sm120 with bf16 split partials (half the workspace; 0.5-16% slower at B=1 on the H200, "
                 "docs/results/cuda-h200.md): kept to measure again where memory is scarcer",
                 [] { return cuda::makeSm120Design(/*partial_bf16=*/true); }, /*experimental=*/true);
}

void unregisterLabDesigns() { unregisterDesign(SM120_BF16P); }
} // namespace canopy
