#include "runtime/eviction_policy.hpp"

#include <fmt/format.h>

#include "core/errors.hpp"
#include "runtime/capuchin_policy.hpp"
#include "runtime/dtr_policy.hpp"
#include "runtime/hybrid_policy.hpp"
#include "runtime/lru_policy.hpp"

namespace tp {

const char* to_string(tensor_state s) {
  switch (s) {
    case tensor_state::resident: return "resident";
    case tensor_state::offloading: return "offloading";
    case tensor_state::on_host: return "on_host";
    case tensor_state::prefetching: return "prefetching";
    case tensor_state::dropped: return "dropped";
  }
  return "?";
}

const char* to_string(eviction_action a) { return a == eviction_action::swap ? "swap" : "drop"; }

policy_kind parse_policy_kind(const std::string& name) {
  for (policy_kind k : {policy_kind::lru, policy_kind::dtr, policy_kind::capuchin, policy_kind::hybrid}) {
    if (name == to_string(k)) return k;
  }
  throw config_error(fmt::format(
      "tensorpager: unknown policy '{}'; accepted: lru, dtr, capuchin, hybrid", name));
}

std::unique_ptr<eviction_policy> make_policy(policy_kind kind, std::size_t sample_size) {
  switch (kind) {
    case policy_kind::lru: return std::make_unique<lru_policy>();
    case policy_kind::dtr: return std::make_unique<dtr_policy>();  // scores every candidate
    case policy_kind::capuchin: return std::make_unique<capuchin_policy>(sample_size);
    case policy_kind::hybrid: return std::make_unique<hybrid_policy>(sample_size);
  }
  return std::make_unique<lru_policy>();
}

namespace detail {

bool adjacent_to(const managed_tensor& t, std::uintptr_t begin, std::uintptr_t end) {
  if (begin == 0 && end == 0) return false;
  const auto p = reinterpret_cast<std::uintptr_t>(t.binding->device_ptr());
  if (p == 0) return false;
  return p == end || p + t.bytes == begin;
}

}  // namespace detail
}  // namespace tp
