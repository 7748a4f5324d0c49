#include "profiler/event_log.hpp"

#include <algorithm>
#include <memory>
#include <new>
#include <utility>

#include "core/errors.hpp"
#include "profiler/allocator_recorder.hpp"

namespace tp::profiler {
bool event_log::writer::next_chunk() noexcept {
  if (!full_) {
    const chunk c = log_.take_chunk(chunks_);
    if (c.data != nullptr) {
      current_ = static_cast<event*>(c.data);
      used_ = 0;
      room_ = c.size;
      return true;
    }
    full_ = true;
  }
  dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return false;
}

namespace {

const event_log_options& checked(const event_log_options& o) {
  if (o.max_events == 0 || o.chunk_events == 0) {
    throw invalid_argument("tp::profiler::event_log: max_events and chunk_events must be > 0 (got " +
                           std::to_string(o.max_events) + " and " + std::to_string(o.chunk_events) + ")");
  }
  return o;
}

}  // namespace

event_log::event_log(const tp::clock& clock, options opts)
    : clock_(clock),
      tsc_(dynamic_cast<const tsc_clock*>(&clock)),
      opts_(checked(opts)),
      chunks_(opts_.chunk_events, (opts_.max_events + opts_.chunk_events - 1) / opts_.chunk_events,
              opts_.spare_chunks) {
  shared_ = &open_writer();
}

event_log::~event_log() {
  for (const chunk& c : allocations_) chunk_source::release(c.data, c.size);
}

event_log::chunk event_log::take_chunk(std::vector<chunk>& owner) noexcept {
  std::size_t reserved = reserved_.load(std::memory_order_relaxed);
  std::size_t n = 0;
  do {
    if (reserved >= opts_.max_events) return {};
    n = std::min(opts_.chunk_events, opts_.max_events - reserved);
  } while (!reserved_.compare_exchange_weak(reserved, reserved + n, std::memory_order_relaxed));
  const chunk c{chunks_.take(n), n};
  if (c.data == nullptr) return {};  // out of host memory: drop rather than fail the allocator
  try {
    std::lock_guard lock(mutex_);
    allocations_.push_back(c);
    try {
      owner.push_back(c);
    } catch (...) {
      allocations_.pop_back();
      throw;
    }
  } catch (...) {
    chunk_source::release(c.data, c.size);
    return {};
  }
  return c;
}

void event_log::record(event e) noexcept {
  std::lock_guard lock(record_mutex_);
  // Stamped under the lock, so the shared writer's events stay in time order.
  e.t_ns = now_ns();
  shared_->append(e);
}

void event_log::record_at(const event& e) noexcept {
  std::lock_guard lock(record_mutex_);
  shared_->append(e);
}

event_log::writer& event_log::open_writer() {
  std::lock_guard lock(mutex_);
  writers_.push_back(std::unique_ptr<writer>(new writer(*this)));
  return *writers_.back();
}

allocator_recorder& event_log::open_allocator_recorder(std::int16_t device) {
  // Ticks when the clock is the counter's, converted by snapshot(); else ns.
  auto r = std::unique_ptr<allocator_recorder>(new allocator_recorder(*this, device, tsc_ != nullptr ? nullptr : &clock_));
  std::lock_guard lock(mutex_);
  recorders_.push_back(std::move(r));
  return *recorders_.back();
}

label_id event_log::intern(std::string_view text) {
  if (text.empty()) return 0;
  std::lock_guard lock(mutex_);
  std::string key(text);
  if (const auto it = label_ids_.find(key); it != label_ids_.end()) return it->second;
  const auto id = static_cast<label_id>(labels_.size());
  labels_.push_back(key);
  label_ids_.emplace(std::move(key), id);
  return id;
}

void event_log::set_context(alloc_context c) noexcept { context_.store(pack(c), std::memory_order_relaxed); }

alloc_context event_log::context() const noexcept { return unpack_context(context_.load(std::memory_order_relaxed)); }

void event_log::add_initial(initial_device_state initial) {
  std::lock_guard lock(mutex_);
  for (auto& s : initial_) {
    if (s.device == initial.device) {
      s = std::move(initial);
      return;
    }
  }
  initial_.push_back(std::move(initial));
}

void event_log::set_device_name(std::int16_t device, std::string name) {
  if (device < 0) return;
  std::lock_guard lock(mutex_);
  const auto i = static_cast<std::size_t>(device);
  if (device_names_.size() <= i) device_names_.resize(i + 1);
  device_names_[i] = std::move(name);
}

std::size_t event_log::size() const noexcept {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const auto& w : writers_) n += w->published_.load(std::memory_order_acquire);
  for (const auto& r : recorders_) n += r->size();
  return n;
}

std::uint64_t event_log::dropped() const noexcept {
  std::lock_guard lock(mutex_);
  std::uint64_t n = 0;
  for (const auto& w : writers_) n += w->dropped_.load(std::memory_order_relaxed);
  for (const auto& r : recorders_) n += r->dropped();
  return n;
}

timeline event_log::snapshot() const {
  timeline t;
  t.max_events = opts_.max_events;
  std::lock_guard lock(mutex_);
  for (const auto& w : writers_) {
    std::size_t left = w->published_.load(std::memory_order_acquire);
    t.dropped += w->dropped_.load(std::memory_order_relaxed);
    for (const chunk& c : w->chunks_) {
      if (left == 0) break;
      const std::size_t n = std::min(left, c.size);
      const auto* first = static_cast<const event*>(c.data);
      t.events.insert(t.events.end(), first, first + n);
      left -= n;
    }
  }
  for (const auto& r : recorders_) {
    r->append_events(t.events, tsc_);
    t.dropped += r->dropped();
  }
  // Each writer's and recorder's events are already in time order;
  // stable_sort merges them and keeps ties in writer order.
  std::stable_sort(t.events.begin(), t.events.end(),
                   [](const event& a, const event& b) { return a.t_ns < b.t_ns; });
  t.labels = labels_;
  t.initial = initial_;
  t.device_names = device_names_;
  return t;
}

}  // namespace tp::profiler
