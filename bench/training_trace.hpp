#pragma once
// The training-like trace of tp_allocator_bench: the allocation pattern of
// one step of a 24-layer transformer-ish model, as a flat list of allocate and
// free operations. A step frees everything it allocates, so steps repeat.
//
// Per step:
//   input                                   (kept to the end of the step)
//   forward, layer i = 0 .. 23:
//     small temporary (16 .. 64 KiB)        allocated, freed at once
//     norm_i      2 .. 8 MiB, growing       saved for backward
//     attention workspace 2 .. 12 MiB       allocated, freed at once
//     hidden_i    2.5 x norm_i (5 .. 20 MiB) saved for backward
//     out_i       as norm_i                  saved (the next layer's input)
//   backward, layer i = 23 .. 0 (grad starts as a tensor like out_23):
//     grad_hidden (as hidden_i)             temporary
//     weight_grad_i 1.5 .. 3 MiB            kept until the optimizer
//     free grad_hidden
//     small temporary                       allocated, freed at once
//     grad_in (as the layer's input)
//     free grad, out_i, hidden_i, norm_i    (reverse of allocation order)
//     grad = grad_in
//   free grad, input
//   optimizer, per layer: small temporary; then every weight_grad_i freed.
// Sizes are deliberately not multiples of 512 B, so rounding shows.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tp::bench {

/// One operation of a trace. slot names the tensor; free ops repeat the
/// allocation's bytes because the upstream (device) free needs them.
struct trace_op {
  enum class kind : unsigned char { allocate, free };
  kind what = kind::allocate;
  std::uint32_t slot = 0;
  std::size_t bytes = 0;
};

/// One training step. Replay with a table of `slots` pointers.
struct training_trace {
  std::vector<trace_op> ops;
  std::uint32_t slots = 0;
  std::size_t allocations() const { return ops.size() / 2; }
};

/// Builds the step described at the top of this file for `layers` layers.
/// Pure: the same argument always gives the same trace.
inline training_trace make_training_trace(std::uint32_t layers = 24) {
  constexpr std::size_t kib = 1024;
  constexpr std::size_t mib = 1024 * kib;
  training_trace t;
  auto alloc = [&t](std::size_t bytes) {
    const std::uint32_t slot = t.slots++;
    t.ops.push_back({trace_op::kind::allocate, slot, bytes});
    return trace_op{trace_op::kind::free, slot, bytes};
  };
  auto release = [&t](const trace_op& tensor) { t.ops.push_back(tensor); };
  auto temporary = [&](std::size_t bytes) { release(alloc(bytes)); };

  struct saved {
    trace_op norm, hidden, out;
  };
  std::vector<saved> layer(layers);
  std::vector<trace_op> weight_grads;

  const trace_op input = alloc(3 * mib + 1000);
  trace_op x = input;
  for (std::uint32_t i = 0; i < layers; ++i) {
    const std::size_t norm = 2 * mib + i * 256 * kib + (i % 3) * 96 * kib + (i % 5) * 100;
    temporary(16 * kib * (1 + i % 4) + 200);
    layer[i].norm = alloc(norm);
    temporary(mib * (2 + (i * 5) % 11) + 300);
    layer[i].hidden = alloc(norm * 5 / 2);
    layer[i].out = alloc(norm);
    x = layer[i].out;
  }
  trace_op grad = alloc(x.bytes);
  for (std::uint32_t i = layers; i-- > 0;) {
    const trace_op grad_hidden = alloc(layer[i].hidden.bytes);
    weight_grads.push_back(alloc(3 * mib / 2 + (i % 4) * 512 * kib + 64));
    release(grad_hidden);
    temporary(8 * kib * (1 + i % 3) + 40);
    const trace_op grad_in = alloc(i == 0 ? input.bytes : layer[i - 1].out.bytes);
    release(grad);
    release(layer[i].out);
    release(layer[i].hidden);
    release(layer[i].norm);
    grad = grad_in;
  }
  release(grad);
  release(input);
  for (std::uint32_t i = 0; i < layers; ++i) temporary(4 * kib + i * 32);
  for (const trace_op& w : weight_grads) release(w);
  return t;
}

/// Replays one step of `t` through `src`, which offers
/// allocate(bytes) -> void* and deallocate(void*, bytes). Requires:
/// ptrs.size() >= t.slots.
template <class Source>
void replay_step(const training_trace& t, Source& src, std::vector<void*>& ptrs) {
  for (const trace_op& op : t.ops) {
    if (op.what == trace_op::kind::allocate) {
      ptrs[op.slot] = src.allocate(op.bytes);
    } else {
      src.deallocate(ptrs[op.slot], op.bytes);
    }
  }
}

}  // namespace tp::bench
