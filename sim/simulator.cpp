#include "sim/simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "allocator/pinned_host_pool.hpp"
#include "core/clock.hpp"
#include "core/errors.hpp"
#include "device/simulated_device.hpp"
#include "sim/contentless_device.hpp"
#include "sim/lend_plan.hpp"
#include "sim/replay_parts.hpp"
#include "sim/recompute_plan.hpp"
#include "sim/segment_cost.hpp"
#include "runtime/runtime.hpp"

namespace tp::sim {
namespace {

using detail::host_clock;
using detail::pin_guard;

// Capacities are counters, not memory (Note [Deterministic addresses]); the
// budget is the caching allocator's.
constexpr std::size_t huge_bytes = std::size_t{1} << 42;
constexpr int max_recompute_depth = 256;

class replay;

// The simulator's side of one tracked storage (storage_binding's contract).
class sim_binding final : public storage_binding {
 public:
  sim_binding(replay& r, std::size_t index, void* ptr) : replay_(r), index_(index), ptr_(ptr) {}
  void* device_ptr() const override { return ptr_; }
  void release_device() noexcept override;
  void* allocate_device(std::size_t bytes, stream_id stream) override;
  void recompute() override;
  void* take() { return std::exchange(ptr_, nullptr); }

 private:
  replay& replay_;
  std::size_t index_;
  void* ptr_;
};

// Note [Re-created storages]
// Re-creating a dropped storage may need an input the trace has already
// freed (Note [Recomputable storages]). Such an input is re-created and then
// kept, tracked as an evictable (and droppable) tensor, until the replay
// ends, as DTR keeps the metadata of freed tensors that evicted ones depend
// on: freeing it at once would re-create it for every dependent, and chains
// of such re-creations grow exponentially with depth (ResNet's residual adds
// read two of them). The policy evicts it like any other tensor. It takes
// over the freed tensor's place in the runtime's lineage (track_options::
// revive), where DTR's heuristic saw it as evicted.
//
// Note [Operator inputs are pinned]
// An operator (or a replay) first makes its inputs resident and pins them
// (memory_runtime::pin), then allocates its outputs, then runs; the pins end
// when it has run. So restoring one input never evicts another, nor does
// allocating an output evict an input, as DTR's simulator locks the parents
// of the operator it runs. Without pins, a restore could evict an input
// already restored, and an operator whose inputs fit the budget together
// could fail ("inputs could not be resident together").
// Measured: docs/decisions.md, Note [Operator inputs are pinned].

// One simulate() call. Members are declared in construction order.
class replay {
 public:
  replay(const trace& t, const sim_options& o)
      : t_(t), o_(o), plan_(recompute_plan::build(t)), segment_prefix_(segment_prefix_ns(t, o.segment_depth)),
        segment_call_(segment_call_of(t, o.segment_depth)),
        lending_(o.lend ? lend_plan::build(t) : lend_plan{}),
        sim_dev_(device_options(o), clk_),
        dev_(sim_dev_, huge_bytes, huge_bytes),
        alloc_(dev_, allocator_options(o)),
        host_(dev_, {}),
        compute_(dev_.create_stream()),
        live_(t.storages.size()),
        writes_(t.storages.size(), 0) {
    memory_runtime::options ro;
    ro.policy = o.policy;
    ro.bandwidth = {.bytes_per_s = o.bandwidth_bytes_per_s, .latency_ns = o.latency_ns};
    ro.seed = o.seed;
    ro.proactive_offload = o.proactive_offload;
    ro.prefetch_ahead = o.prefetch_ahead;
    ro.sample_size = o.sample_size;
    rt_ = std::make_unique<memory_runtime>(dev_, alloc_, host_, clk_, ro);
  }
  ~replay() {
    // Untrack before the runtime goes, then free what the replay still holds.
    try {
      for (std::size_t i = 0; i < live_.size(); ++i) free_index(i);
    } catch (...) {
      std::terminate();  // untrack of a tensor the runtime tracks cannot fail: a simulator bug
    }
    rt_.reset();
  }
  replay(const replay&) = delete;
  replay& operator=(const replay&) = delete;

  sim_report run() {
    sim_report r;
    r.budget_bytes = o_.budget_bytes;
    r.policy = o_.policy;
    try {
      for (std::size_t k = 0; k < o_.repeat; ++k) {
        const std::int64_t t0 = clk_.now_ns();
        const std::int64_t waited0 = clk_.waited_ns();
        const std::uint64_t syncs0 = sim_dev_.host_syncs();
        const runtime_stats before = rt_->stats();
        compute_ns_ = recompute_ns_ = 0;
        replay_once();
        const std::uint64_t syncs = sim_dev_.host_syncs() - syncs0;
        const std::int64_t waited = clk_.waited_ns() - waited0;
        dev_.synchronize(compute_);  // the step ends when its last operator has run
        const runtime_stats after = rt_->stats();
        const std::int64_t elapsed = clk_.now_ns() - t0;
        r.step_ns = elapsed / static_cast<std::int64_t>(t_.steps());
        r.compute_ns = compute_ns_;
        r.recompute_ns = recompute_ns_;
        r.stall_ns = elapsed - compute_ns_ - recompute_ns_;
        r.host_wait_ns = waited;
        r.host_syncs = syncs;
        r.offloaded_bytes = after.offloaded_bytes - before.offloaded_bytes;
        r.prefetched_bytes = after.prefetched_bytes - before.prefetched_bytes;
        r.evictions = after.evictions + after.proactive_offloads - before.evictions - before.proactive_offloads;
        r.drops = after.drops - before.drops;
        r.recomputes = recomputes_;
        recomputes_ = 0;
      }
    } catch (const out_of_memory& e) {
      r.fits = false;
      r.failure = e.what();
    }
    const allocator_stats a = alloc_.stats();
    r.peak_reserved = static_cast<std::size_t>(a.reserved_bytes.all().peak);
    r.peak_allocated = static_cast<std::size_t>(a.allocated_bytes.all().peak);
    r.fragmentation = r.peak_reserved == 0 ? 0.0
        : 1.0 - static_cast<double>(r.peak_allocated) / static_cast<double>(r.peak_reserved);
    r.policy_wall_ns = rt_->stats().policy_ns;
    r.plan_wall_ns = rt_->stats().plan_ns;
    return r;
  }

  // --- sim_binding's calls --------------------------------------------------
  void* allocate(std::size_t bytes) { return alloc_.allocate(bytes, compute_); }
  void deallocate(void* p) noexcept { alloc_.deallocate(p); }  // a foreign pointer ends the process
  // Re-creates storage `index` at its current version (Note [Recomputable
  // storages]): replays its producer, then the writes applied so far, each
  // with its inputs pinned (Note [Operator inputs are pinned]).
  void* recompute(std::size_t index, int depth) {
    if (depth > max_recompute_depth) {
      throw error(fmt::format("simulator: recompute chain deeper than {} at storage {}",
                              max_recompute_depth, t_.storages[index].id));
    }
    void* p = nullptr;
    {
      const op_record& op = t_.ops[plan_.producer[index]];
      pin_guard pins(*rt_);
      pin_inputs(op, index, depth, pins, segment_call_[plan_.producer[index]]);
      p = allocate(t_.storages[index].bytes);
      run_for(segment_prefix_[plan_.producer[index]] + op.time_ns, recompute_ns_);
    }
    for (std::size_t k = 0; k < writes_[index]; ++k) {
      const op_record& op = t_.ops[plan_.writers[index][k]];
      pin_guard pins(*rt_);
      pin_inputs(op, index, depth, pins);
      run_for(op.time_ns, recompute_ns_);
    }
    ++recomputes_;
    return p;
  }

 private:
  struct slot {
    bool alive = false;
    void* ptr = nullptr;  // untracked storages
    std::unique_ptr<sim_binding> binding;
    tensor_id tensor{};
    std::optional<tensor_id> freed;  // the tensor it was when it was last freed
  };

  static caching_allocator::options allocator_options(const sim_options& o) {
    caching_allocator::options a;
    a.budget = o.budget_bytes;
    a.max_split_size = o.max_split_size;
    a.expandable_segments = o.expandable_segments;
    return a;
  }
  static simulated_device::options device_options(const sim_options& o) {
    if (!(o.bandwidth_bytes_per_s > 0) || o.latency_ns < 0 || o.repeat == 0 || !(o.compute_scale > 0)) {
      throw error(fmt::format(
          "simulator: bandwidth must be > 0 (got {}), latency >= 0 (got {}), repeat >= 1 (got {}), "
          "compute scale > 0 (got {})", o.bandwidth_bytes_per_s, o.latency_ns, o.repeat, o.compute_scale));
    }
    simulated_device::options d;
    d.capacity_bytes = huge_bytes;
    d.host_capacity_bytes = huge_bytes;
    d.bandwidth_bytes_per_s = o.bandwidth_bytes_per_s;
    d.latency_ns = o.latency_ns;
    d.copy_contents = false;  // Note [Copies without contents]
    return d;
  }

  std::int64_t scaled(std::int64_t ns) const {
    return o_.compute_scale == 1.0 ? ns
                                   : static_cast<std::int64_t>(std::llround(static_cast<double>(ns) * o_.compute_scale));
  }

  // Note [Simulated time]: the operator runs on the compute stream, and the
  // host issues the next one when this one would have finished.
  void run_for(std::int64_t recorded_ns, std::int64_t& bucket) {
    const std::int64_t cost = scaled(recorded_ns);
    sim_dev_.enqueue_work(compute_, cost);
    clk_.advance(cost);
    bucket += cost;
  }

  // What the runtime is told a drop costs (0: swap only): the producer and
  // the writes a replay must repeat.
  std::int64_t recompute_cost(std::size_t i) const {
    if (!plan_.recomputable[i]) return 0;
    std::int64_t cost = scaled(segment_prefix_[plan_.producer[i]] + t_.ops[plan_.producer[i]].time_ns);
    for (std::size_t k = 0; k < writes_[i]; ++k) cost += scaled(t_.ops[plan_.writers[i][k]].time_ns);
    return std::max<std::int64_t>(cost, 1);
  }

  // Pins every tracked storage op reads or writes, except `skip` (the one
  // being re-created), re-creating freed ones first (Note [Re-created
  // storages]).
  // `rerun`: the segment call a rerun runs op in (Note [Segment recompute
  // in the simulator]), whose own outputs it computes on the way: they are
  // not pinned.
  void pin_inputs(const op_record& op, std::size_t skip, int depth, pin_guard& pins, std::size_t rerun = no_call) {
    for (const auto* list : {&op.inputs, &op.mutates}) {
      for (storage_id id : *list) {
        const std::size_t i = t_.index_of(id);
        if (i == skip) continue;
        if (rerun != no_call && plan_.producer[i] != recompute_plan::no_producer &&
            segment_call_[plan_.producer[i]] == rerun) {
          continue;
        }
        slot& in = live_[i];
        if (!in.binding && !in.alive) {
          void* p = recompute(i, depth + 1);
          in.binding = std::make_unique<sim_binding>(*this, i, p);
          track_options more;
          more.revive = in.freed;
          in.tensor = rt_->track(*in.binding, t_.storages[i].bytes, compute_, recompute_cost(i), true, more);
        }
        if (in.binding && std::find(pins.pinned().begin(), pins.pinned().end(), in.tensor) == pins.pinned().end()) {
          pins.pin(in.tensor);
        }
      }
    }
  }

  void replay_once() {
    std::fill(writes_.begin(), writes_.end(), 0);
    // Pre-existing storages come first, and again after a replay freed them.
    for (std::size_t i = 0; i < live_.size() && t_.storages[i].pre_existing; ++i) {
      if (!live_[i].alive) live_[i].ptr = allocate(t_.storages[i].bytes);
      live_[i].alive = true;
      live_[i].freed.reset();
    }
    for (std::size_t k = 0; k < t_.events.size(); ++k) {
      settle_loans(k);
      const event& e = t_.events[k];
      switch (e.what) {
        case event::kind::op: run_op(t_.ops[e.op]); break;
        case event::kind::free: free_index(t_.index_of(e.id)); break;
        case event::kind::step: rt_->step(); break;
      }
    }
    settle_loans(t_.events.size());
    for (std::size_t i = 0; i < live_.size(); ++i) {
      if (!t_.storages[i].pre_existing) free_index(i);
      live_[i].freed.reset();
    }
    rt_->step();
  }

  void run_op(const op_record& op) {
    std::vector<tensor_id> parents;
    {
      pin_guard pins(*rt_);
      pin_inputs(op, recompute_plan::no_producer, 0, pins);
      parents = pins.pinned();
      for (storage_id id : op.outputs) {
        const std::size_t i = t_.index_of(id);
        live_[i].ptr = allocate(t_.storages[i].bytes);
        live_[i].alive = true;
      }
      run_for(op.time_ns, compute_ns_);
    }
    for (storage_id id : op.mutates) {
      const std::size_t i = t_.index_of(id);
      if (writes_[i] < plan_.writers[i].size() && &t_.ops[plan_.writers[i][writes_[i]]] == &op) ++writes_[i];
      if (live_[i].binding) rt_->set_recompute_cost(live_[i].tensor, recompute_cost(i));
    }
    track_options more;
    more.parents = parents;
    for (storage_id id : op.outputs) {
      const std::size_t i = t_.index_of(id);
      if (!t_.storages[i].saved) continue;
      slot& s = live_[i];
      s.binding = std::make_unique<sim_binding>(*this, i, std::exchange(s.ptr, nullptr));
      s.tensor = rt_->track(*s.binding, t_.storages[i].bytes, compute_, recompute_cost(i), true, more);
    }
  }

  // Note [Lending in the simulator]: the loans that end and begin before
  // event k. A loan is a swap-only tracked tensor over the slot's memory;
  // giving it back restores it (a stall if it was away) and untracks it.
  void settle_loans(std::size_t k) {
    if (!o_.lend) return;
    for (std::size_t i : lending_.give_back_before[k]) {
      slot& s = live_[i];
      rt_->access(s.tensor);
      s.ptr = s.binding->take();
      rt_->untrack(s.tensor);
      s.binding.reset();
    }
    for (std::size_t i : lending_.lend_before[k]) {
      slot& s = live_[i];
      s.binding = std::make_unique<sim_binding>(*this, i, std::exchange(s.ptr, nullptr));
      s.tensor = rt_->track(*s.binding, t_.storages[i].bytes, compute_, /*recompute_cost_ns=*/0);
    }
  }

  void free_index(std::size_t i) {
    slot& s = live_[i];
    if (s.binding) {
      rt_->untrack(s.tensor);
      s.freed = s.tensor;
      if (void* p = s.binding->take()) deallocate(p);
      s.binding.reset();
    }
    if (s.ptr != nullptr) deallocate(std::exchange(s.ptr, nullptr));
    s.alive = false;
  }

  const trace& t_;
  const sim_options o_;
  const recompute_plan plan_;
  const std::vector<std::int64_t> segment_prefix_;  // Note [Segment recompute in the simulator]
  const std::vector<std::size_t> segment_call_;
  const lend_plan lending_;
  host_clock clk_;
  simulated_device sim_dev_;
  contentless_device dev_;  // Note [Copies without contents]
  caching_allocator alloc_;
  pinned_host_pool host_;
  stream_id compute_;
  std::vector<slot> live_;
  std::vector<std::size_t> writes_;  // in-place writes applied this replay, per storage
  std::unique_ptr<memory_runtime> rt_;
  std::int64_t compute_ns_ = 0;
  std::int64_t recompute_ns_ = 0;
  std::uint64_t recomputes_ = 0;
};

void sim_binding::release_device() noexcept {
  replay_.deallocate(ptr_);
  ptr_ = nullptr;
}
void* sim_binding::allocate_device(std::size_t bytes, stream_id /*stream*/) {  // one stream in a trace
  ptr_ = replay_.allocate(bytes);
  return ptr_;
}
void sim_binding::recompute() { ptr_ = replay_.recompute(index_, 0); }

}  // namespace

sim_report simulate(const trace& t, const sim_options& o) {
  replay r(t, o);
  return r.run();
}

void compare(sim_report& r, const sim_report& unconstrained) {
  r.slowdown = unconstrained.step_ns > 0
                   ? static_cast<double>(r.step_ns) / static_cast<double>(unconstrained.step_ns)
                   : 1.0;
}

}  // namespace tp::sim
