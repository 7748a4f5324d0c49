#include "runtime/step_planner.hpp"

#include <algorithm>
#include <limits>

namespace tp {
namespace {

// Note [Planning margins]
// Two constants, chosen with tp-sim on DTR's two logs at the reference's
// ratios 0.9..0.2 (bench/results/sim_dtr.md); slowdowns at ratio 0.5 for
// ResNet-32 / the Transformer:
//  - the copy channels are planned at 70% of the bandwidth. The fluid model
//    lets copies share a bucket where the device runs them one after
//    another, in the order they were issued, and the device can run behind
//    the host. At 90% prefetches came late (1.060x / 1.040x), at 70%
//    1.021x / 1.017x, at 50% too few copies fit and more was dropped
//    (1.037x / 1.030x, 1.044x for the Transformer at 0.6);
//  - a swap costs 2% of its round trip even when it hides: the planner then
//    prefers one large tensor to several small ones (each copy pays the
//    latency, and a small prefetch waits behind a large one), and dropping a
//    tensor that is nearly free to recompute to copying it. At 0: 1.040x /
//    1.017x; at 20% drops whose replays cost more than their price won
//    (1.089x / 1.096x).

class copy_channel {
 public:
  copy_channel(std::int64_t bucket_ns, double derate)
      : w_(bucket_ns), cap_(static_cast<std::int64_t>(static_cast<double>(bucket_ns) * derate)) {}

  // Fills `need` ns of channel time from `ready` on; returns when it ends.
  std::int64_t forward(std::int64_t ready, std::int64_t need, bool commit) {
    std::int64_t b = std::max<std::int64_t>(ready, 0) / w_;
    std::int64_t at = std::max<std::int64_t>(ready, 0);
    for (;; ++b) {
      const std::int64_t room = std::min(free(b), (b + 1) * w_ - at);
      const std::int64_t take = std::min(room, need);
      if (commit) use(b, take);
      need -= take;
      if (need == 0) return at + take;
      at = (b + 1) * w_;
    }
  }
  // Fills `need` ns of channel time ending by `deadline`; returns when it
  // starts, or nothing when the channel has no room before the deadline.
  std::optional<std::int64_t> backward(std::int64_t deadline, std::int64_t need, bool commit) {
    if (deadline <= 0) return std::nullopt;
    std::int64_t at = deadline;
    std::int64_t left = need;
    for (std::int64_t b = (deadline - 1) / w_; b >= 0; --b) {
      const std::int64_t take = std::min({free(b), at - b * w_, left});
      left -= take;
      if (left == 0) {
        const std::int64_t start = at - take;
        if (commit) fill_back(deadline, need);
        return start;
      }
      at = b * w_;
    }
    return std::nullopt;
  }

 private:
  void fill_back(std::int64_t deadline, std::int64_t need) {
    std::int64_t at = deadline;
    for (std::int64_t b = (deadline - 1) / w_; b >= 0 && need > 0; --b) {
      const std::int64_t take = std::min({free(b), at - b * w_, need});
      use(b, take);
      need -= take;
      at = b * w_;
    }
  }
  std::int64_t free(std::int64_t b) const {
    return static_cast<std::size_t>(b) < used_.size() ? cap_ - used_[static_cast<std::size_t>(b)] : cap_;
  }
  void use(std::int64_t b, std::int64_t ns) {
    if (static_cast<std::size_t>(b) >= used_.size()) used_.resize(static_cast<std::size_t>(b) + 1, 0);
    used_[static_cast<std::size_t>(b)] += ns;
  }
  std::int64_t w_;
  std::int64_t cap_;  // usable ns per bucket
  std::vector<std::int64_t> used_;
};

struct candidate {
  std::size_t ordinal = 0;
  eviction_action action = eviction_action::drop;
  double cost_per_byte = std::numeric_limits<double>::infinity();
  std::int64_t cost_ns = 0;
  std::size_t away_until = 0;  // event index at which it is present again
  std::size_t prefetch_at = 0;
  std::int64_t out_ready = 0, in_deadline = 0, transfer = 0;
};

}  // namespace

step_plan make_step_plan(const step_record& rec, const step_planner_inputs& in) {
  step_plan plan;
  const std::size_t n = rec.events.size();
  plan.floor_bytes = rec.pressure_floor_bytes > 0 ? rec.pressure_floor_bytes : in.unmanaged_bytes;
  if (!in.budget_bytes || n == 0 || rec.live_bytes.size() != n) return plan;
  const std::size_t budget = *in.budget_bytes;
  const std::size_t floor = plan.floor_bytes;
  const std::size_t count = rec.tensors.size();

  auto t_at = [&](std::size_t i) { return rec.events[std::min(i, n - 1)].t_ns; };
  std::vector<std::int64_t> times(n);
  for (std::size_t i = 0; i < n; ++i) times[i] = i > 0 ? std::max(times[i - 1], rec.events[i].t_ns) : rec.events[i].t_ns;
  std::vector<std::size_t> end(count, n);  // untrack position
  for (std::size_t i = 0; i < n; ++i) {
    if (rec.events[i].kind == step_event_kind::untrack && rec.events[i].ordinal < count) end[rec.events[i].ordinal] = i;
  }
  const std::int64_t bucket_ns = std::max<std::int64_t>(rec.duration_ns / 4096, 1000);
  constexpr double swap_weight = 0.02;  // Note [Planning margins]
  constexpr double derate = 0.7;
  constexpr std::size_t lookahead = 1;  // events whose growth one pricing covers
  copy_channel out(bucket_ns, derate), back(bucket_ns, derate);

  std::vector<std::size_t> away_until(count, 0);
  std::vector<bool> away_by_drop(count, false);
  std::vector<std::size_t> returning(n + 1, 0);  // bytes back at each event
  // The time to have o back at event u when it is not there: its recompute,
  // and that of its parents not there either (dropped by the plan, or freed
  // by the step: the replay re-creates them, once); a parent swapped away
  // costs an unplanned copy. Depth-limited; an ancestor reached twice is
  // priced twice (a replay of each child may need it again: over, not
  // under).
  const auto chain = [&](auto& self, std::size_t o, std::size_t u, int depth) -> std::int64_t {
    std::int64_t cost = rec.tensors[o].recompute_cost_ns;
    if (depth >= 4) return cost;
    for (std::size_t p : rec.tensors[o].parents) {
      if (p >= count) continue;
      const step_tensor& pt = rec.tensors[p];
      const bool freed = end[p] <= u;
      if (!freed && away_until[p] <= u) continue;  // there
      if ((freed || away_by_drop[p]) && pt.recompute_cost_ns > 0) {
        cost += self(self, p, u, depth + 1);
      } else {
        cost += in.bandwidth.transfer_ns(pt.bytes);
      }
    }
    return cost;
  };
  std::vector<std::size_t> live;                 // evictable ordinals live now
  std::vector<candidate> heap;                   // this event's candidates, cheapest on top
  // Cheaper per byte first; then larger; then tracked earlier (in a
  // training step, needed again later).
  const auto worse = [&](const candidate& a, const candidate& b) {
    if (a.cost_per_byte != b.cost_per_byte) return a.cost_per_byte > b.cost_per_byte;
    if (rec.tensors[a.ordinal].bytes != rec.tensors[b.ordinal].bytes) {
      return rec.tensors[a.ordinal].bytes < rec.tensors[b.ordinal].bytes;
    }
    return a.ordinal > b.ordinal;
  };
  std::size_t saved = 0;

  for (std::size_t i = 0; i < n; ++i) {
    saved -= std::min(saved, returning[i]);
    const step_event& e = rec.events[i];
    if (e.ordinal < count && rec.tensors[e.ordinal].evictable) {
      if (e.kind == step_event_kind::track) live.push_back(e.ordinal);
      if (e.kind == step_event_kind::untrack) {
        const auto it = std::find(live.begin(), live.end(), e.ordinal);
        if (it != live.end()) live.erase(it);
      }
    }
    std::size_t need = floor + rec.live_bytes[i] - std::min(saved, rec.live_bytes[i]);
    if (need <= budget) {
      plan.planned_peak_bytes = std::max(plan.planned_peak_bytes, need);
      continue;
    }
    // The first input of the operator that allocates at i: inputs pinned
    // then are accessed in the run of access events just before i.
    std::size_t run_begin = i;
    while (run_begin > 0 && rec.events[run_begin - 1].kind == step_event_kind::access) --run_begin;
    const std::int64_t needed_by = i > 0 ? t_at(i - 1) : t_at(0);
    // The cheapest way for o to be away at i, if any.
    const auto evaluate = [&](std::size_t o) -> std::optional<candidate> {
      if (away_until[o] > i || o == e.ordinal) return std::nullopt;
      const step_tensor& st = rec.tensors[o];
      const auto next_it = std::upper_bound(st.uses.begin(), st.uses.end(), i);
      if (next_it == st.uses.begin()) return std::nullopt;  // not tracked yet
      const std::size_t prev = *(next_it - 1);
      const std::int64_t prev_ns = st.uses_ns[static_cast<std::size_t>(next_it - 1 - st.uses.begin())];
      const bool used_again = next_it != st.uses.end();
      const std::size_t next = used_again ? *next_it : n;
      candidate c;
      c.ordinal = o;
      const double bytes = static_cast<double>(std::max<std::size_t>(st.bytes, 1));
      // A drop: at once, unless the operator at i reads it.
      if (st.recompute_cost_ns > 0 && prev < run_begin) {
        const std::int64_t cost = used_again ? chain(chain, o, next, 0) : 0;
        c.action = eviction_action::drop;
        c.cost_ns = cost;
        c.cost_per_byte = static_cast<double>(cost) / bytes;
        c.away_until = used_again ? next : end[o];
      }
      // A swap: only when it is away at i, its copies hidden.
      const std::int64_t transfer = in.bandwidth.transfer_ns(st.bytes);
      const auto swap_cost = static_cast<std::int64_t>(swap_weight * static_cast<double>(2 * transfer));
      const double swap_per_byte = static_cast<double>(swap_cost) / bytes;
      if (swap_per_byte < c.cost_per_byte && out.forward(prev_ns, transfer, false) <= needed_by) {
        std::optional<std::size_t> prefetch_at;
        bool ok = true;
        if (used_again) {
          const auto start = back.backward(t_at(next), transfer, false);
          ok = start && *start >= t_at(i);
          if (ok) {
            // The last event recorded before the prefetch must start
            // (event times do not decrease).
            const auto after = std::upper_bound(times.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                                times.begin() + static_cast<std::ptrdiff_t>(next), *start);
            prefetch_at = static_cast<std::size_t>(after - times.begin()) - 1;
          }
        }
        if (ok) {
          c.action = eviction_action::swap;
          c.cost_ns = swap_cost;
          c.cost_per_byte = swap_per_byte;
          c.away_until = used_again ? *prefetch_at + 1 : end[o];
          c.prefetch_at = used_again ? *prefetch_at : n;
          c.out_ready = prev_ns;
          c.in_deadline = used_again ? t_at(next) : 0;
          c.transfer = transfer;
        }
      }
      if (c.cost_per_byte == std::numeric_limits<double>::infinity()) return std::nullopt;
      return c;
    };
    // Cover the growth of the next few events too, so that the candidates
    // are priced once for a run of events over budget, not at each of them.
    std::size_t ahead = rec.live_bytes[i];
    for (std::size_t j = i + 1; j < std::min(n, i + lookahead); ++j) ahead = std::max(ahead, rec.live_bytes[j]);
    const std::size_t target = budget - std::min(budget, ahead - rec.live_bytes[i]);
    heap.clear();
    for (std::size_t o : live) {
      if (auto c = evaluate(o)) heap.push_back(*c);
    }
    std::make_heap(heap.begin(), heap.end(), worse);
    while ((need > budget || (need > target && !heap.empty())) && !heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), worse);
      const candidate was = heap.back();
      heap.pop_back();
      // Earlier choices at this event used channel time and dropped parents:
      // price it again, and put it back if it got dearer.
      const std::optional<candidate> now = evaluate(was.ordinal);
      if (!now) continue;
      if (now->action != was.action || now->cost_per_byte > was.cost_per_byte) {
        heap.push_back(*now);
        std::push_heap(heap.begin(), heap.end(), worse);
        continue;
      }
      const candidate& best = *now;
      const step_tensor& st = rec.tensors[best.ordinal];
      const auto next_it = std::upper_bound(st.uses.begin(), st.uses.end(), i);
      planned_eviction pe;
      pe.ordinal = best.ordinal;
      pe.action = best.action;
      pe.back_at = next_it != st.uses.end() ? *next_it : n;
      if (best.action == eviction_action::swap) {
        out.forward(best.out_ready, best.transfer, true);
        if (pe.back_at < n) back.backward(best.in_deadline, best.transfer, true);
        pe.leave_at = *(next_it - 1);
        pe.prefetch_at = best.prefetch_at;
        plan.swapped_bytes += st.bytes;
      } else {
        pe.leave_at = i > 0 ? i - 1 : 0;
        pe.prefetch_at = n;
        plan.dropped_bytes += st.bytes;
      }
      plan.added_time_ns += best.cost_ns;
      plan.evictions.push_back(pe);
      away_until[best.ordinal] = best.away_until;
      away_by_drop[best.ordinal] = best.action == eviction_action::drop;
      saved += st.bytes;
      if (best.away_until < n) returning[best.away_until] += st.bytes;
      need -= std::min(need, st.bytes);
    }
    if (need > budget) plan.fits = false;  // nothing more can be away at i
    plan.planned_peak_bytes = std::max(plan.planned_peak_bytes, need);
  }
  std::stable_sort(plan.evictions.begin(), plan.evictions.end(),
                   [](const planned_eviction& a, const planned_eviction& b) { return a.leave_at < b.leave_at; });
  for (std::size_t k = 0; k < plan.evictions.size(); ++k) {
    if (plan.evictions[k].action == eviction_action::swap && plan.evictions[k].prefetch_at < n) {
      plan.prefetch_order.push_back(k);
    }
  }
  std::stable_sort(plan.prefetch_order.begin(), plan.prefetch_order.end(), [&](std::size_t a, std::size_t b) {
    return plan.evictions[a].prefetch_at < plan.evictions[b].prefetch_at;
  });
  return plan;
}

}  // namespace tp
