// simulated_device: streams, events, copies and the test hooks (Note
// [Simulated stream model] in simulated_device.hpp), and the waits that
// freeing memory makes for the copies that use it.

#include "device/simulated_device.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "core/errors.hpp"
#include "device/simulated_device_check.hpp"

namespace tp {
namespace {

using detail::as_bytes;
using detail::hex;

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  return as_bytes(a) < as_bytes(b) + b_bytes && as_bytes(b) < as_bytes(a) + a_bytes;
}

}  // namespace

std::optional<std::uintptr_t> simulated_device::copy_using(const void* p, std::size_t bytes) const {
  for (const auto& [id, s] : streams_)
    for (const op& o : s.ops)
      if (o.what == op::kind::copy && (overlaps(p, bytes, o.dst, o.bytes) || overlaps(p, bytes, o.src, o.bytes)))
        return id;
  return std::nullopt;
}

void simulated_device::wait_unused(std::unique_lock<std::mutex>& lock, const void* p,
                                   std::size_t bytes) {
  bool waited = false;
  block_until(lock, [&]() -> std::optional<std::uintptr_t> {
    const std::optional<std::uintptr_t> stream = copy_using(p, bytes);
    if (stream && !waited) ++host_syncs_;  // a free that waits is a host synchronisation
    waited = waited || stream.has_value();
    return stream;
  });
}

// --- streams and events ------------------------------------------------------

simulated_device::stream_state& simulated_device::any_stream(stream_id stream) {
  auto it = streams_.find(to_underlying(stream));
  if (it != streams_.end()) return it->second;
  throw invalid_argument(
      fmt::format("simulated_device: unknown stream id {}", to_underlying(stream)));
}

simulated_device::stream_state& simulated_device::live_stream(stream_id stream) {
  stream_state& s = any_stream(stream);
  if (!s.destroyed) return s;
  throw invalid_argument(
      fmt::format("simulated_device: stream id {} was destroyed", to_underlying(stream)));
}

simulated_device::event_state& simulated_device::live_event(event_id event) {
  auto it = events_.find(to_underlying(event));
  if (it != events_.end()) return it->second;
  throw invalid_argument(
      fmt::format("simulated_device: unknown event id {}", to_underlying(event)));
}

void simulated_device::enqueue(stream_state& s, op o) {
  o.enqueue_ns = clock_.now_ns();
  s.ops.push_back(std::move(o));
  ++s.enqueued;
}

std::optional<std::int64_t> simulated_device::head_finish(const stream_state& s) {
  const op& o = s.ops.front();
  if (s.held || (o.what == op::kind::wait && !o.rec->retired)) return std::nullopt;
  std::int64_t start = std::max({s.last_finish_ns, o.enqueue_ns, s.release_ns});
  if (o.what == op::kind::wait) start = std::max(start, o.rec->finish_ns);
  return start + o.duration_ns;
}

void simulated_device::retire_ready() {
  const std::int64_t now = clock_.now_ns();
  for (bool progress = true; progress;) {
    progress = false;
    for (auto it = streams_.begin(); it != streams_.end();) {
      stream_state& s = it->second;
      while (!s.ops.empty()) {
        const std::optional<std::int64_t> finish = head_finish(s);
        if (!finish || *finish > now) break;
        op& o = s.ops.front();
        if (o.what == op::kind::copy && o.bytes != 0 && opts_.copy_contents) {
          std::memmove(o.dst, o.src, o.bytes);
        }
        if (o.what == op::kind::record) {
          o.rec->retired = true;
          o.rec->finish_ns = *finish;
        }
        s.last_finish_ns = *finish;
        ++s.retired;
        s.ops.pop_front();
        progress = true;
      }
      it = s.destroyed && s.ops.empty() ? streams_.erase(it) : std::next(it);
    }
  }
}

std::optional<std::int64_t> simulated_device::blocking_finish(std::uintptr_t stream) const {
  // Dependencies point at records enqueued earlier, so this chain ends.
  for (;;) {
    auto it = streams_.find(stream);
    TP_CHECK(it != streams_.end() && !it->second.ops.empty(),
             "blocked on stream {} with no pending ops", stream);
    const stream_state& s = it->second;
    const op& o = s.ops.front();
    if (s.held || o.what != op::kind::wait || o.rec->retired) return head_finish(s);
    stream = o.rec->stream;
  }
}

template <class Blocker>
void simulated_device::block_until(std::unique_lock<std::mutex>& lock, Blocker blocker) {
  for (;;) {
    retire_ready();
    const std::optional<std::uintptr_t> stream = blocker();
    if (!stream) return;
    const std::optional<std::int64_t> finish = blocking_finish(*stream);
    if (!finish) {
      released_.wait(lock);
    } else {
      lock.unlock();
      clock_.wait_until(*finish);
      lock.lock();
    }
  }
}

stream_id simulated_device::create_stream() {
  std::lock_guard lock(mu_);
  const std::uintptr_t id = next_stream_++;
  streams_.emplace(id, stream_state{});
  return stream_id{id};
}

void simulated_device::destroy_stream(stream_id stream) noexcept {
  if (stream == default_stream) return;
  std::lock_guard lock(mu_);
  retire_ready();
  auto it = streams_.find(to_underlying(stream));
  TP_CHECK(it != streams_.end() && !it->second.destroyed, "destroy_stream: unknown stream id {}",
           to_underlying(stream));
  it->second.destroyed = true;
  retire_ready();  // erases it at once when nothing is pending
}

bool simulated_device::is_stream(stream_id stream) const {
  std::lock_guard lock(mu_);
  auto it = streams_.find(to_underlying(stream));
  return it != streams_.end() && !it->second.destroyed;
}

void simulated_device::synchronize(stream_id stream) {
  std::unique_lock lock(mu_);
  ++host_syncs_;
  retire_ready();
  const std::uint64_t target = live_stream(stream).enqueued;
  const std::uintptr_t id = to_underlying(stream);
  block_until(lock, [&]() -> std::optional<std::uintptr_t> {
    auto it = streams_.find(id);  // a destroyed stream is erased once drained
    if (it == streams_.end() || it->second.retired >= target) return std::nullopt;
    return id;
  });
}

void simulated_device::synchronize_device() {
  std::unique_lock lock(mu_);
  ++host_syncs_;
  retire_ready();
  std::vector<std::pair<std::uintptr_t, std::uint64_t>> targets;  // stream, ops enqueued so far
  for (const auto& [id, s] : streams_) targets.emplace_back(id, s.enqueued);
  block_until(lock, [&]() -> std::optional<std::uintptr_t> {
    for (const auto& [id, target] : targets) {
      auto it = streams_.find(id);  // a destroyed stream is erased once drained
      if (it != streams_.end() && it->second.retired < target) return id;
    }
    return std::nullopt;
  });
}

event_id simulated_device::create_event() {
  std::lock_guard lock(mu_);
  const std::uintptr_t id = next_event_++;
  events_.emplace(id, event_state{});
  return event_id{id};
}

void simulated_device::destroy_event(event_id event) noexcept {
  std::lock_guard lock(mu_);
  TP_CHECK(events_.erase(to_underlying(event)) == 1, "destroy_event: unknown event id {}",
           to_underlying(event));
}

void simulated_device::record_event(event_id event, stream_id stream) {
  std::lock_guard lock(mu_);
  retire_ready();
  event_state& e = live_event(event);
  stream_state& s = live_stream(stream);
  e.latest = std::make_shared<record>(record{.stream = to_underlying(stream)});
  enqueue(s, op{.what = op::kind::record, .rec = e.latest});
}

bool simulated_device::query_event(event_id event) {
  std::lock_guard lock(mu_);
  retire_ready();
  const event_state& e = live_event(event);
  return e.latest == nullptr || e.latest->retired;
}

void simulated_device::synchronize_event(event_id event) {
  std::unique_lock lock(mu_);
  ++host_syncs_;
  retire_ready();
  const std::shared_ptr<record> rec = live_event(event).latest;
  if (rec == nullptr) return;
  block_until(lock, [&]() -> std::optional<std::uintptr_t> {
    if (rec->retired) return std::nullopt;
    return rec->stream;
  });
}

std::optional<std::int64_t> simulated_device::elapsed_ns(event_id start, event_id end) {
  std::lock_guard lock(mu_);
  retire_ready();
  if (!(opts_.bandwidth_bytes_per_s > 0) && opts_.latency_ns == 0) return std::nullopt;  // no copy model
  const std::shared_ptr<record>& a = live_event(start).latest;
  const std::shared_ptr<record>& b = live_event(end).latest;
  if (a == nullptr || b == nullptr || !a->retired || !b->retired) {
    throw invalid_argument(fmt::format("elapsed_ns: events {} and {} must both be recorded and complete",
                                       to_underlying(start), to_underlying(end)));
  }
  return b->finish_ns - a->finish_ns;
}

void simulated_device::stream_wait_event(stream_id stream, event_id event) {
  std::lock_guard lock(mu_);
  retire_ready();
  const event_state& e = live_event(event);
  stream_state& s = live_stream(stream);
  if (e.latest == nullptr || e.latest->retired) return;
  enqueue(s, op{.what = op::kind::wait, .rec = e.latest});
}

void simulated_device::copy_async(void* dst, const void* src, std::size_t bytes, stream_id stream) {
  std::lock_guard lock(mu_);
  retire_ready();
  stream_state& s = live_stream(stream);
  for (const void* p : {static_cast<const void*>(dst), src})
    if (!copyable_range(p, bytes))
      throw invalid_argument(fmt::format(
          "simulated_device::copy_async({}, {}, {}): [{}, +{}) runs past the end of its allocation "
          "or host buffer, or into an unmapped part of a reservation",
          hex(dst), hex(src), bytes, hex(p), bytes));
  const double bandwidth = opts_.bandwidth_bytes_per_s;
  const double transfer_ns =
      bandwidth > 0.0 ? std::ceil(static_cast<double>(bytes) * 1e9 / bandwidth) : 0.0;
  enqueue(s, op{.what = op::kind::copy,
                .dst = dst,
                .src = src,
                .bytes = bytes,
                .duration_ns = opts_.latency_ns + static_cast<std::int64_t>(transfer_ns)});
}

// --- test hooks --------------------------------------------------------------

void simulated_device::hold_stream(stream_id stream) {
  std::lock_guard lock(mu_);
  retire_ready();
  any_stream(stream).held = true;
}

void simulated_device::release_stream(stream_id stream) {
  {
    std::lock_guard lock(mu_);
    retire_ready();
    stream_state& s = any_stream(stream);
    if (s.held) {
      s.held = false;
      s.release_ns = clock_.now_ns();
    }
    retire_ready();
  }
  released_.notify_all();
}

std::size_t simulated_device::pending_ops(stream_id stream) {
  std::lock_guard lock(mu_);
  retire_ready();
  return any_stream(stream).ops.size();
}

void simulated_device::poll() {
  std::lock_guard lock(mu_);
  retire_ready();
}

void simulated_device::enqueue_work(stream_id stream, std::int64_t duration_ns) {
  if (duration_ns < 0)
    throw invalid_argument(
        fmt::format("simulated_device::enqueue_work: duration {} ns must be >= 0", duration_ns));
  std::lock_guard lock(mu_);
  retire_ready();
  enqueue(live_stream(stream), op{.what = op::kind::work, .duration_ns = duration_ns});
}

std::uint64_t simulated_device::host_syncs() const {
  std::lock_guard lock(mu_);
  return host_syncs_;
}

}  // namespace tp
