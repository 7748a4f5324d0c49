#include "runtime/step_planner.hpp"

#include <algorithm>
#include <limits>

#include "runtime/copy_channel.hpp"

namespace tp {
namespace {

// Note [Planning margins]
// Two constants, chosen with tp-sim on DTR's two logs at the reference's
// ratios 0.9..0.2 (measured: docs/decisions.md, "Planning margins"):
//  - the copy channels are planned at 70% of the bandwidth. The fluid model
//    lets copies share a bucket where the device runs them one after
//    another, in the order they were issued, and the device can run behind
//    the host. Planned nearer the full bandwidth, prefetches come late;
//    much lower, too few copies fit and more is dropped;
//  - a swap costs 2% of its round trip even when it hides: the planner then
//    prefers one large tensor to several small ones (each copy pays the
//    latency, and a small prefetch waits behind a large one), and dropping a
//    tensor that is nearly free to recompute to copying it. Priced much
//    higher, drops whose reruns cost more than their price win.
constexpr double swap_weight = 0.02;
constexpr double derate = 0.7;
constexpr std::size_t lookahead = 1;  // events whose growth one pricing covers

using detail::copy_channel;

/// One way for a tensor to be away at an event, and its price.
struct candidate {
  std::size_t ordinal = 0;
  eviction_action action = eviction_action::drop;
  double cost_per_byte = std::numeric_limits<double>::infinity();
  std::int64_t cost_ns = 0;
  std::size_t away_until = 0;  // event index at which it is present again
  std::size_t prefetch_at = 0;
  std::int64_t out_ready = 0, in_deadline = 0;
  std::int64_t transfer_out = 0, transfer_in = 0;  // one copy each way (Note [Copy cost model])
};

/// An event where the model passes the budget, as pricing there sees it.
struct pressure_point {
  std::size_t at = 0;          // the event
  std::size_t ordinal = 0;     // its tensor: never away there
  std::size_t run_begin = 0;   // the first access of the operator that allocates there
  std::int64_t needed_by = 0;  // an offload helps only if it ends by then
};

/// A tensor's uses around an event: the last one at or before it, the next.
struct uses_around {
  std::size_t prev = 0;
  std::int64_t prev_ns = 0;
  std::size_t next = 0;  // the number of events when not used again
  bool used_again = false;
};

/// Note [Step plan] over one recorded step. Used once: plan() hands the
/// result out. Thread-safety: none; lives inside make_step_plan().
class step_planner {
 public:
  step_planner(const step_record& rec, const step_planner_inputs& in)
      : rec_(rec),
        in_(in),
        n_(rec.events.size()),
        count_(rec.tensors.size()),
        budget_(in.budget_bytes.value_or(0)),
        out_(bucket_ns(rec), derate),
        back_(bucket_ns(rec), derate) {}

  step_plan plan() &&;

 private:
  static std::int64_t bucket_ns(const step_record& rec) { return std::max<std::int64_t>(rec.duration_ns / 4096, 1000); }
  std::int64_t t_at(std::size_t i) const { return rec_.events[std::min(i, n_ - 1)].t_ns; }
  void index_events();
  void visit(std::size_t i);
  void follow_live(const step_event& e);
  pressure_point pressure_at(std::size_t i) const;
  std::size_t target_at(std::size_t i) const;
  std::size_t relieve(const pressure_point& p, std::size_t need);
  void price_candidates(const pressure_point& p);
  std::optional<candidate> pop_cheapest(const pressure_point& p);
  bool dearer(const candidate& a, const candidate& b) const;
  std::optional<candidate> evaluate(std::size_t o, const pressure_point& p);
  void price_drop(candidate& c, const uses_around& u, const pressure_point& p) const;
  void price_swap(candidate& c, const uses_around& u, const pressure_point& p);
  std::optional<std::size_t> prefetch_event(std::size_t i, std::size_t next, std::int64_t transfer);
  std::int64_t chain_cost(std::size_t o, std::size_t u, int depth) const;
  void commit(const candidate& best, std::size_t i);
  void order_evictions();

  const step_record& rec_;
  const step_planner_inputs& in_;
  const std::size_t n_;      // events
  const std::size_t count_;  // tensors
  const std::size_t budget_;
  step_plan plan_;
  copy_channel out_, back_;
  std::vector<std::int64_t> times_;      // event times, made non-decreasing
  std::vector<std::size_t> end_;         // untrack position, or n_
  std::vector<std::size_t> away_until_;  // by ordinal: present again at this event
  std::vector<bool> away_by_drop_;
  std::vector<std::size_t> returning_;  // bytes back at each event
  std::vector<std::size_t> live_;       // evictable ordinals live now
  std::vector<candidate> heap_;         // this event's candidates, cheapest on top
  std::size_t saved_ = 0;               // bytes the plan keeps away now
};

step_plan step_planner::plan() && {
  plan_.floor_bytes = rec_.pressure_floor_bytes > 0 ? rec_.pressure_floor_bytes : in_.unmanaged_bytes;
  if (!in_.budget_bytes || n_ == 0 || rec_.live_bytes.size() != n_) return std::move(plan_);
  index_events();
  for (std::size_t i = 0; i < n_; ++i) visit(i);
  order_evictions();
  return std::move(plan_);
}

void step_planner::index_events() {
  times_.resize(n_);
  for (std::size_t i = 0; i < n_; ++i) {
    times_[i] = i > 0 ? std::max(times_[i - 1], rec_.events[i].t_ns) : rec_.events[i].t_ns;
  }
  end_.assign(count_, n_);
  for (std::size_t i = 0; i < n_; ++i) {
    if (rec_.events[i].kind == step_event_kind::untrack && rec_.events[i].ordinal < count_) {
      end_[rec_.events[i].ordinal] = i;
    }
  }
  away_until_.assign(count_, 0);
  away_by_drop_.assign(count_, false);
  returning_.assign(n_ + 1, 0);
}

// One step of the sweep: the model at event i, relieved where it passes the
// budget.
void step_planner::visit(std::size_t i) {
  saved_ -= std::min(saved_, returning_[i]);
  follow_live(rec_.events[i]);
  const std::size_t live = rec_.live_bytes[i];
  std::size_t need = plan_.floor_bytes + live - std::min(saved_, live);
  if (need > budget_) need = relieve(pressure_at(i), need);
  plan_.planned_peak_bytes = std::max(plan_.planned_peak_bytes, need);
}

void step_planner::follow_live(const step_event& e) {
  if (e.ordinal >= count_ || !rec_.tensors[e.ordinal].evictable) return;
  if (e.kind == step_event_kind::track) live_.push_back(e.ordinal);
  if (e.kind == step_event_kind::untrack) {
    const auto it = std::find(live_.begin(), live_.end(), e.ordinal);
    if (it != live_.end()) live_.erase(it);
  }
}

pressure_point step_planner::pressure_at(std::size_t i) const {
  // The first input of the operator that allocates at i: inputs pinned then
  // are accessed in the run of access events just before i.
  std::size_t run_begin = i;
  while (run_begin > 0 && rec_.events[run_begin - 1].kind == step_event_kind::access) --run_begin;
  return {i, rec_.events[i].ordinal, run_begin, i > 0 ? t_at(i - 1) : t_at(0)};
}

// What relieving event i aims for: the budget less the growth of the next
// few events, so that the candidates are priced once for a run of events
// over budget, not at each of them.
std::size_t step_planner::target_at(std::size_t i) const {
  std::size_t ahead = rec_.live_bytes[i];
  for (std::size_t j = i + 1; j < std::min(n_, i + lookahead); ++j) ahead = std::max(ahead, rec_.live_bytes[j]);
  return budget_ - std::min(budget_, ahead - rec_.live_bytes[i]);
}

// Takes the cheapest candidates away at p until the model is at its target
// or none is left; returns what the device then holds. Requires: need >
// budget_.
std::size_t step_planner::relieve(const pressure_point& p, std::size_t need) {
  const std::size_t target = target_at(p.at);  // <= budget_
  price_candidates(p);
  while (need > target && !heap_.empty()) {
    const std::optional<candidate> best = pop_cheapest(p);
    if (!best) continue;
    commit(*best, p.at);
    need -= std::min(need, rec_.tensors[best->ordinal].bytes);
  }
  if (need > budget_) plan_.fits = false;  // nothing more can be away at p
  return need;
}

void step_planner::price_candidates(const pressure_point& p) {
  heap_.clear();
  for (std::size_t o : live_) {
    if (auto c = evaluate(o, p)) heap_.push_back(*c);
  }
  std::make_heap(heap_.begin(), heap_.end(), [this](const candidate& a, const candidate& b) { return dearer(a, b); });
}

// The cheapest candidate, off the heap. Earlier choices at this event used
// channel time and dropped parents: it is priced again, and put back if it
// got dearer (nullopt then, as when it can no longer be away).
std::optional<candidate> step_planner::pop_cheapest(const pressure_point& p) {
  const auto order = [this](const candidate& a, const candidate& b) { return dearer(a, b); };
  std::pop_heap(heap_.begin(), heap_.end(), order);
  const candidate was = heap_.back();
  heap_.pop_back();
  std::optional<candidate> now = evaluate(was.ordinal, p);
  if (now && (now->action != was.action || now->cost_per_byte > was.cost_per_byte)) {
    heap_.push_back(*now);
    std::push_heap(heap_.begin(), heap_.end(), order);
    return std::nullopt;
  }
  return now;
}

// Heap order: cheaper per byte first; then larger; then tracked earlier (in
// a training step, needed again later).
bool step_planner::dearer(const candidate& a, const candidate& b) const {
  if (a.cost_per_byte != b.cost_per_byte) return a.cost_per_byte > b.cost_per_byte;
  const std::size_t a_bytes = rec_.tensors[a.ordinal].bytes;
  const std::size_t b_bytes = rec_.tensors[b.ordinal].bytes;
  if (a_bytes != b_bytes) return a_bytes < b_bytes;
  return a.ordinal > b.ordinal;
}

// The cheapest way for o to be away at p, if any.
std::optional<candidate> step_planner::evaluate(std::size_t o, const pressure_point& p) {
  if (away_until_[o] > p.at || o == p.ordinal) return std::nullopt;
  const step_tensor& st = rec_.tensors[o];
  const auto next_it = std::upper_bound(st.uses.begin(), st.uses.end(), p.at);
  if (next_it == st.uses.begin()) return std::nullopt;  // not tracked yet
  uses_around u;
  u.prev = *(next_it - 1);
  u.prev_ns = st.uses_ns[static_cast<std::size_t>(next_it - 1 - st.uses.begin())];
  u.used_again = next_it != st.uses.end();
  u.next = u.used_again ? *next_it : n_;
  candidate c;
  c.ordinal = o;
  price_drop(c, u, p);
  price_swap(c, u, p);
  if (c.cost_per_byte == std::numeric_limits<double>::infinity()) return std::nullopt;
  return c;
}

// A drop: at once, unless the operator at p reads it.
void step_planner::price_drop(candidate& c, const uses_around& u, const pressure_point& p) const {
  const step_tensor& st = rec_.tensors[c.ordinal];
  if (st.recompute_cost_ns <= 0 || u.prev >= p.run_begin) return;
  const std::int64_t cost = u.used_again ? chain_cost(c.ordinal, u.next, 0) : 0;
  c.action = eviction_action::drop;
  c.cost_ns = cost;
  c.cost_per_byte = static_cast<double>(cost) / static_cast<double>(std::max<std::size_t>(st.bytes, 1));
  c.away_until = u.used_again ? u.next : end_[c.ordinal];
}

// A swap, when it is cheaper than what c holds: only when it is away at p,
// its copies hidden.
void step_planner::price_swap(candidate& c, const uses_around& u, const pressure_point& p) {
  const step_tensor& st = rec_.tensors[c.ordinal];
  const std::int64_t out = in_.copies.transfer_ns(copy_direction::to_host, st.bytes);
  const std::int64_t back = in_.copies.transfer_ns(copy_direction::to_device, st.bytes);
  const auto swap_cost = static_cast<std::int64_t>(swap_weight * static_cast<double>(out + back));
  const double per_byte = static_cast<double>(swap_cost) / static_cast<double>(std::max<std::size_t>(st.bytes, 1));
  if (!(per_byte < c.cost_per_byte) || out_.forward(u.prev_ns, out, false) > p.needed_by) return;
  std::optional<std::size_t> prefetch_at;
  if (u.used_again) {
    prefetch_at = prefetch_event(p.at, u.next, back);
    if (!prefetch_at) return;
  }
  c.action = eviction_action::swap;
  c.cost_ns = swap_cost;
  c.cost_per_byte = per_byte;
  c.away_until = u.used_again ? *prefetch_at + 1 : end_[c.ordinal];
  c.prefetch_at = u.used_again ? *prefetch_at : n_;
  c.out_ready = u.prev_ns;
  c.in_deadline = u.used_again ? t_at(u.next) : 0;
  c.transfer_out = out;
  c.transfer_in = back;
}

// The last event recorded before a prefetch of `transfer` ns that ends by
// the use at `next` must start (event times do not decrease); nullopt when
// the channel cannot fit it after event i.
std::optional<std::size_t> step_planner::prefetch_event(std::size_t i, std::size_t next, std::int64_t transfer) {
  const std::optional<std::int64_t> start = back_.backward(t_at(next), transfer, false);
  if (!start || *start < t_at(i)) return std::nullopt;
  const auto after = std::upper_bound(times_.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                      times_.begin() + static_cast<std::ptrdiff_t>(next), *start);
  return static_cast<std::size_t>(after - times_.begin()) - 1;
}

// The time to have o back at event u when it is not there: its recompute,
// and that of its parents not there either (dropped by the plan, or freed
// by the step: the rerun re-creates them, once); a parent swapped away
// costs an unplanned copy. Depth-limited; an ancestor reached twice is
// priced twice (a rerun of each child may need it again: over, not under).
std::int64_t step_planner::chain_cost(std::size_t o, std::size_t u, int depth) const {
  std::int64_t cost = rec_.tensors[o].recompute_cost_ns;
  if (depth >= 4) return cost;
  for (std::size_t p : rec_.tensors[o].parents) {
    if (p >= count_) continue;
    const step_tensor& pt = rec_.tensors[p];
    const bool freed = end_[p] <= u;
    if (!freed && away_until_[p] <= u) continue;  // there
    if ((freed || away_by_drop_[p]) && pt.recompute_cost_ns > 0) {
      cost += chain_cost(p, u, depth + 1);
    } else {
      cost += in_.copies.transfer_ns(copy_direction::to_device, pt.bytes);
    }
  }
  return cost;
}

// Puts `best` in the plan at event i, with the channel time it takes.
void step_planner::commit(const candidate& best, std::size_t i) {
  const step_tensor& st = rec_.tensors[best.ordinal];
  const auto next_it = std::upper_bound(st.uses.begin(), st.uses.end(), i);
  planned_eviction pe;
  pe.ordinal = best.ordinal;
  pe.action = best.action;
  pe.back_at = next_it != st.uses.end() ? *next_it : n_;
  if (best.action == eviction_action::swap) {
    out_.forward(best.out_ready, best.transfer_out, true);
    if (pe.back_at < n_) back_.backward(best.in_deadline, best.transfer_in, true);
    pe.leave_at = *(next_it - 1);
    pe.prefetch_at = best.prefetch_at;
    plan_.swapped_bytes += st.bytes;
  } else {
    pe.leave_at = i > 0 ? i - 1 : 0;
    pe.prefetch_at = n_;
    plan_.dropped_bytes += st.bytes;
  }
  plan_.added_time_ns += best.cost_ns;
  plan_.evictions.push_back(pe);
  away_until_[best.ordinal] = best.away_until;
  away_by_drop_[best.ordinal] = best.action == eviction_action::drop;
  saved_ += st.bytes;
  if (best.away_until < n_) returning_[best.away_until] += st.bytes;
}

void step_planner::order_evictions() {
  std::vector<planned_eviction>& ev = plan_.evictions;
  std::stable_sort(ev.begin(), ev.end(),
                   [](const planned_eviction& a, const planned_eviction& b) { return a.leave_at < b.leave_at; });
  for (std::size_t k = 0; k < ev.size(); ++k) {
    if (ev[k].action == eviction_action::swap && ev[k].prefetch_at < n_) plan_.prefetch_order.push_back(k);
  }
  std::stable_sort(plan_.prefetch_order.begin(), plan_.prefetch_order.end(),
                   [&](std::size_t a, std::size_t b) { return ev[a].prefetch_at < ev[b].prefetch_at; });
}

}  // namespace

step_plan make_step_plan(const step_record& rec, const step_planner_inputs& in) {
  return step_planner(rec, in).plan();
}

}  // namespace tp
