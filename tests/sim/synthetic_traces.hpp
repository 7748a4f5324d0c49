#pragma once
// Synthetic traces with known answers, built in code.

#include <cstddef>
#include <cstdint>
#include <string>

#include "sim/trace.hpp"

namespace tp::sim::testing {

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;

/// Appends storages and events; ids count from 1.
class trace_builder {
 public:
  storage_id pre_existing(std::size_t bytes) {
    storage s;
    s.id = next_++;
    s.bytes = bytes;
    s.pre_existing = true;
    t_.storages.push_back(s);
    return s.id;
  }
  /// One op with one output (bytes 0: none). Returns the output's id (0: none).
  storage_id op(const std::string& name, std::vector<storage_id> inputs, std::size_t out_bytes, bool saved,
                std::int64_t time_ns, phase when = phase::forward) {
    op_record r;
    r.name = name;
    r.inputs = std::move(inputs);
    r.time_ns = time_ns;
    r.when = when;
    storage_id out = 0;
    if (out_bytes > 0) {
      storage s;
      s.id = out = next_++;
      s.bytes = out_bytes;
      s.saved = saved;
      t_.storages.push_back(s);
      r.outputs.push_back(out);
    }
    t_.events.push_back({event::kind::op, t_.ops.size(), 0});
    t_.ops.push_back(std::move(r));
    return out;
  }
  void free(storage_id id) { t_.events.push_back({event::kind::free, 0, id}); }
  trace build() {
    t_.source = "synthetic";
    t_.validate("synthetic");
    return t_;
  }

 private:
  trace t_;
  storage_id next_ = 1;
};

/// A training step over a linear chain of `layers` equal layers: forward
/// layer i reads activation i-1 and its weight and writes activation i
/// (saved for backward, recomputable from activation i-1); backward layer i
/// reads activation i, the incoming gradient and the weight, writes the
/// outgoing gradient, then frees the incoming gradient and activation i.
inline trace linear_chain(int layers, std::size_t activation, std::int64_t fwd_ns, std::int64_t bwd_ns,
                          std::size_t weight = 64 * KiB) {
  trace_builder b;
  std::vector<storage_id> w;
  for (int i = 0; i < layers; ++i) w.push_back(b.pre_existing(weight));
  const storage_id input = b.pre_existing(activation);
  std::vector<storage_id> act{input};
  for (int i = 0; i < layers; ++i) {
    act.push_back(b.op("linear", {act.back(), w[static_cast<std::size_t>(i)]}, activation, true, fwd_ns));
  }
  storage_id grad = b.op("loss_backward", {act.back()}, activation, false, fwd_ns, phase::backward);
  for (int i = layers; i >= 1; --i) {
    const auto u = static_cast<std::size_t>(i);
    const storage_id next = b.op("linear_backward", {act[u - 1], grad, w[u - 1]}, activation, false, bwd_ns,
                                 phase::backward);
    b.free(grad);
    b.free(act[u]);
    grad = next;
  }
  b.free(grad);
  return b.build();
}

}  // namespace tp::sim::testing
