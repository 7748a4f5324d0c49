#pragma once
// Which eviction policy the runtime uses (DESIGN.md, "Policies"). Its own
// header, with no dependencies, so that the configuration (config)
// names the same type without linking the runtime.

namespace tp {

enum class policy_kind : unsigned char { lru, dtr, capuchin, hybrid };

/// The policy when none is named: the one constant every default (the
/// `policy` key, the runtime's and a budget session's options, tp-sim)
/// refers to. hybrid is best in the simulator's sweeps (bench/results/sim_dtr.md).
inline constexpr policy_kind default_policy = policy_kind::hybrid;

/// "lru", "dtr", "capuchin", "hybrid". Pure.
constexpr const char* to_string(policy_kind k) noexcept {
  switch (k) {
    case policy_kind::lru: return "lru";
    case policy_kind::dtr: return "dtr";
    case policy_kind::capuchin: return "capuchin";
    case policy_kind::hybrid: return "hybrid";
  }
  return "?";
}

}  // namespace tp
