#include "profiler/timeline_analysis.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>

namespace tp::profiler {
namespace {

bool is_allocator_kind(event_kind k) { return k <= event_kind::reclaim; }

/// Applies what the notes say about a block (Note [What a block holds]).
void apply_note(const block_note* n, live_block& b) {
  if (n == nullptr) return;
  if (n->category) b.category = *n->category;
  if (n->label != 0) b.label = n->label;
  b.origin = n->origin;
}

/// The state of one device's memory as events are applied in order.
class replay {
 public:
  /// start_ns: when recording began (its first event), the age origin of
  /// the blocks already live then.
  replay(const initial_device_state* initial, const block_notes& notes, std::int64_t start_ns) : notes_(notes) {
    if (initial == nullptr) return;
    const std::int16_t device = initial->device;
    sample_.budget = initial->budget;
    for (const segment_snapshot& s : initial->segments) {
      sample_.reserved += static_cast<std::int64_t>(s.total_size);
      for (const block_snapshot& b : s.blocks) {
        if (b.state != block_state::active_allocated) continue;
        live_block lb;
        lb.address = b.address;
        lb.bytes = b.size;
        lb.requested = b.requested_size;
        lb.stream = to_underlying(s.stream);
        lb.t_alloc_ns = start_ns;
        lb.before_recording = true;
        apply_note(notes_.for_initial(device, b.address), lb);
        if (lb.category != category::unknown) known_[slot(lb.category)] += static_cast<std::int64_t>(lb.bytes);
        live_.emplace(b.address, lb);
        sample_.allocated += static_cast<std::int64_t>(b.size);
      }
    }
    recount_unknown();
  }

  /// Applies e, the position-th event; returns whether e changes what a sample shows.
  bool apply(const event& e, std::size_t position) {
    sample_.t_ns = e.t_ns;
    switch (e.kind) {
      case event_kind::alloc: {
        live_block b;
        b.address = e.address;
        b.bytes = e.bytes;
        b.requested = static_cast<std::uint64_t>(std::max<std::int64_t>(e.detail, 0));
        b.stream = e.stream;
        b.t_alloc_ns = e.t_ns;
        b.category = e.category;
        b.label = e.label;
        apply_note(notes_.for_alloc(position), b);
        live_[e.address] = b;
        if (b.category != category::unknown) known_[slot(b.category)] += static_cast<std::int64_t>(b.bytes);
        break;
      }
      case event_kind::free_requested:
        if (const auto it = live_.find(e.address); it != live_.end()) {
          if (it->second.category != category::unknown) {
            known_[slot(it->second.category)] -= static_cast<std::int64_t>(it->second.bytes);
          }
          live_.erase(it);
        }
        break;
      case event_kind::budget_change:
        sample_.budget = e.bytes == 0 ? -1 : static_cast<std::int64_t>(e.bytes);
        break;
      default:
        break;
    }
    if (e.allocated_bytes >= 0) sample_.allocated = e.allocated_bytes;
    if (e.reserved_bytes >= 0) sample_.reserved = e.reserved_bytes;
    const bool host_changed = e.host_bytes >= 0 && e.host_bytes != sample_.host;
    if (e.host_bytes >= 0) sample_.host = e.host_bytes;
    recount_unknown();
    return is_allocator_kind(e.kind) || host_changed;
  }

  const memory_sample& sample() const { return sample_; }
  const std::unordered_map<std::uint64_t, live_block>& live() const { return live_; }

 private:
  static std::size_t slot(category c) { return static_cast<std::size_t>(c); }

  /// Note [Categories are inferred]: unknown is whatever the known
  /// categories leave of the allocator's own total.
  void recount_unknown() {
    std::int64_t known = 0;
    for (std::size_t i = 1; i < category_count; ++i) {
      sample_.by_category[i] = std::max<std::int64_t>(known_[i], 0);
      known += sample_.by_category[i];
    }
    sample_.by_category[0] = std::max<std::int64_t>(sample_.allocated - known, 0);
  }

  const block_notes& notes_;
  memory_sample sample_;
  std::array<std::int64_t, category_count> known_{};
  std::unordered_map<std::uint64_t, live_block> live_;
};

/// Runtime figures: counts, bytes, and begin-to-end durations matched by id.
class runtime_totals {
 public:
  void apply(const event& e, device_totals& t) {
    switch (e.kind) {
      case event_kind::eviction:
        ++t.evictions;
        if (e.detail == 1) ++t.dropped_evictions;
        break;
      case event_kind::offload_begin:
      case event_kind::prefetch_begin:
      case event_kind::recompute_begin:
        begun_[{e.kind, e.id}] = e.t_ns;
        break;
      case event_kind::offload_end:
        ++t.offloads;
        t.offloaded_bytes += e.bytes;
        t.offload_ns += take(event_kind::offload_begin, e);
        break;
      case event_kind::prefetch_end:
        ++t.prefetches;
        t.prefetched_bytes += e.bytes;
        t.prefetch_ns += take(event_kind::prefetch_begin, e);
        break;
      case event_kind::recompute_end:
        ++t.recomputes;
        t.recomputed_bytes += e.bytes;
        t.recompute_ns += take(event_kind::recompute_begin, e);
        break;
      case event_kind::stall:
        ++t.stalls;
        t.stall_ns += std::max<std::int64_t>(e.detail, 0);
        break;
      default:
        break;
    }
  }

 private:
  std::int64_t take(event_kind begin, const event& end) {
    const auto it = begun_.find({begin, end.id});
    if (it == begun_.end()) return 0;
    const std::int64_t d = end.t_ns - it->second;
    begun_.erase(it);
    return std::max<std::int64_t>(d, 0);
  }
  std::map<std::pair<event_kind, std::uint64_t>, std::int64_t> begun_;
};

/// Extends the last span of `spans` to the sample, or opens a new one when the
/// budget changed.
void note_budget(std::vector<budget_span>& spans, const memory_sample& s) {
  if (spans.empty() || spans.back().bytes != s.budget) {
    if (!spans.empty()) spans.back().to_ns = s.t_ns;
    spans.push_back(budget_span{s.t_ns, s.t_ns, s.budget});
  } else {
    spans.back().to_ns = s.t_ns;
  }
}

device_analysis analyze_device(const timeline& t, const block_notes& notes, std::int16_t device,
                               const analysis_options& opts) {
  const initial_device_state* initial = nullptr;
  for (const auto& s : t.initial) {
    if (s.device == device) initial = &s;
  }
  device_analysis out;
  out.device = device;
  device_totals& tot = out.totals;
  const std::int64_t start_ns = t.events.empty() ? 0 : t.events.front().t_ns;
  replay r(initial, notes, start_ns);
  runtime_totals rt;
  std::size_t peak_index = SIZE_MAX;  // index into t.events
  bool first = true;
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    const event& e = t.events[i];
    if (e.device != device || e.kind == event_kind::step) continue;
    if (first) tot.start_ns = e.t_ns;
    first = false;
    tot.end_ns = e.t_ns;
    rt.apply(e, tot);
    switch (e.kind) {
      case event_kind::alloc: ++tot.allocs; break;
      case event_kind::segment_alloc:
      case event_kind::segment_map: ++tot.segment_allocs; break;
      case event_kind::segment_free:
      case event_kind::segment_unmap: ++tot.segment_frees; break;
      case event_kind::oom: ++tot.ooms; break;
      case event_kind::device_sync: ++tot.device_syncs; break;
      case event_kind::reclaim:
        ++tot.reclaims;
        tot.reclaimed_bytes += static_cast<std::uint64_t>(std::max<std::int64_t>(e.detail, 0));
        break;
      default: break;
    }
    const bool changed = r.apply(e, i);
    note_budget(tot.budgets, r.sample());
    if (!changed) continue;
    const memory_sample& s = r.sample();
    out.samples.push_back(s);
    if (peak_index == SIZE_MAX || s.allocated > tot.peak_allocated) {
      tot.peak_allocated = s.allocated;
      tot.peak_t_ns = s.t_ns;
      tot.at_peak = s.by_category;
      tot.cached_free_at_peak = s.reserved - s.allocated;
      tot.budget_at_peak = s.budget;
      peak_index = i;
    }
    tot.peak_reserved = std::max(tot.peak_reserved, s.reserved);
    tot.peak_host = std::max(tot.peak_host, s.host);
  }
  if (peak_index == SIZE_MAX) return out;

  // Second pass up to the peak: what was live there.
  replay at_peak(initial, notes, start_ns);
  for (std::size_t i = 0; i <= peak_index; ++i) {
    if (t.events[i].device == device && t.events[i].kind != event_kind::step) at_peak.apply(t.events[i], i);
  }
  out.live_at_peak = at_peak.live().size();
  std::vector<live_block> blocks;
  blocks.reserve(at_peak.live().size());
  for (const auto& [address, b] : at_peak.live()) blocks.push_back(b);
  const std::size_t n = std::min(opts.top_n, blocks.size());
  std::partial_sort(blocks.begin(), blocks.begin() + static_cast<std::ptrdiff_t>(n), blocks.end(),
                    [](const live_block& a, const live_block& b) {
                      return a.bytes != b.bytes ? a.bytes > b.bytes : a.address < b.address;
                    });
  blocks.resize(n);
  out.top_at_peak = std::move(blocks);
  return out;
}

}  // namespace

timeline_analysis analyze(const timeline& t, const analysis_options& opts) {
  timeline_analysis a;
  a.events = t.events.size();
  a.dropped = t.dropped;
  a.max_events = t.max_events;
  if (!t.events.empty()) {
    a.start_ns = t.events.front().t_ns;
    a.end_ns = t.events.back().t_ns;
  }
  std::vector<std::int16_t> devices;
  for (const event& e : t.events) {
    if (e.kind == event_kind::step) {
      a.steps_ns.push_back(e.t_ns);
    } else if (std::find(devices.begin(), devices.end(), e.device) == devices.end()) {
      devices.push_back(e.device);
    }
  }
  std::sort(devices.begin(), devices.end());
  const block_notes notes(t);
  for (std::int16_t d : devices) a.devices.push_back(analyze_device(t, notes, d, opts));
  return a;
}

std::vector<memory_sample> downsample(const std::vector<memory_sample>& samples, std::size_t max_points) {
  if (max_points < 4 || samples.size() <= max_points) return samples;
  const std::size_t buckets = max_points / 3;
  const std::int64_t t0 = samples.front().t_ns;
  const std::int64_t span = std::max<std::int64_t>(samples.back().t_ns - t0, 1);
  std::vector<memory_sample> out;
  out.reserve(max_points + 1);
  std::size_t i = 0;
  while (i < samples.size()) {
    const auto bucket = static_cast<std::size_t>(static_cast<double>(samples[i].t_ns - t0) /
                                                 static_cast<double>(span) * static_cast<double>(buckets));
    std::size_t j = i, lo = i, hi = i;
    for (; j < samples.size(); ++j) {
      const auto b = static_cast<std::size_t>(static_cast<double>(samples[j].t_ns - t0) /
                                              static_cast<double>(span) * static_cast<double>(buckets));
      if (b != bucket) break;
      if (samples[j].allocated < samples[lo].allocated) lo = j;
      if (samples[j].allocated > samples[hi].allocated) hi = j;
    }
    std::size_t keep[] = {i, std::min(lo, hi), std::max(lo, hi)};
    for (std::size_t k = 0; k < 3; ++k) {
      if (k == 0 || keep[k] != keep[k - 1]) out.push_back(samples[keep[k]]);
    }
    i = j;
  }
  if (out.back().t_ns != samples.back().t_ns || out.back().allocated != samples.back().allocated) {
    out.push_back(samples.back());
  }
  return out;
}

}  // namespace tp::profiler
