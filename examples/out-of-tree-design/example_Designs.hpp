/// \file example_Designs.hpp
/// \brief The example's designs, made by the plugin's registration (example_Plugin.cpp).
#pragma once

#include "canopy_Design.hpp"

namespace example
{
canopy::DesignPtr makeHostDesign();
#ifdef EXAMPLE_WITH_CUDA
canopy::DesignPtr makeCudaDesign();
#endif
} // namespace example
