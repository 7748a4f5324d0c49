#pragma once
// The installed adapter as the budget runtime's glue needs it (install.cpp
// owns the registry). Internal to hooks/. Includes c10.

#include <c10/core/Allocator.h>

#include "hooks/allocator_control.hpp"
#include "config/config.hpp"
#include "hooks/runtime_host.hpp"

namespace tp::hooks {

/// References into adapters, which are never destroyed.
struct installed_adapter {
  allocator_control& control;
  runtime_host& host;
  c10::Allocator& allocator;  ///< what torch allocates through
  config cfg;                 ///< the installed configuration
};

/// The installed adapter. Throws tp::error when nothing is installed.
/// Thread-safety: any thread.
installed_adapter installed_adapter_now();

}  // namespace tp::hooks
