#include "device/simulated_device.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "core/errors.hpp"

// For noexcept members: a broken precondition is a bug in the caller, and the
// simulator's job is to say so loudly rather than corrupt memory.
#define TP_CHECK(cond, ...)                                                         \
  do {                                                                              \
    if (!(cond)) check_failed(#cond, __FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)

namespace tp {
namespace {

[[noreturn]] void check_failed(const char* cond, const char* file, int line,
                               const std::string& msg) {
  std::fprintf(stderr, "tensorpager: check failed at %s:%d: %s\n  %s\n", file, line, cond,
               msg.c_str());
  std::abort();
}

constexpr std::size_t host_alignment = 512;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

const std::byte* as_bytes(const void* p) { return static_cast<const std::byte*>(p); }

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

std::string hex(const void* p) { return fmt::format("{}", p); }

// The region of map that contains p, or end().
template <class Map>
auto find_region(Map& map, const void* p) {
  auto it = map.upper_bound(as_bytes(p));
  if (it == map.begin()) return map.end();
  --it;
  return as_bytes(p) < it->first + it->second.bytes ? it : map.end();
}

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  return as_bytes(a) < as_bytes(b) + b_bytes && as_bytes(b) < as_bytes(a) + a_bytes;
}

}  // namespace

simulated_device::simulated_device(clock& clk) : simulated_device(options{}, clk) {}

simulated_device::simulated_device(options opts, clock& clk) : opts_(opts), clock_(clk) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t g = opts_.granularity;
  if (g == 0 || (g & (g - 1)) != 0 || g % page != 0)
    throw invalid_argument(
        fmt::format("simulated_device: granularity {} must be a power of two and a multiple of the "
                    "page size {}",
                    g, page));
  if (!(opts_.bandwidth_bytes_per_s >= 0.0) || std::isinf(opts_.bandwidth_bytes_per_s))
    throw invalid_argument(fmt::format(
        "simulated_device: bandwidth_bytes_per_s {} must be finite and >= 0 (0: instant)",
        opts_.bandwidth_bytes_per_s));
  if (opts_.latency_ns < 0)
    throw invalid_argument(
        fmt::format("simulated_device: latency_ns {} must be >= 0", opts_.latency_ns));
  streams_.emplace(to_underlying(default_stream), stream_state{});
}

simulated_device::~simulated_device() {
  for (auto& [p, r] : device_allocs_) std::free(const_cast<std::byte*>(p));
  for (auto& [p, r] : host_allocs_) std::free(const_cast<std::byte*>(p));
  for (auto& [p, r] : reservations_) munmap(const_cast<std::byte*>(p), r.bytes);
}

std::string simulated_device::name() const { return "simulated"; }

// --- plain and host memory ---------------------------------------------------

void* simulated_device::allocate_in(region_map& map, std::size_t& used, std::size_t capacity,
                                    std::size_t bytes, const char* what) {
  if (bytes == 0)
    throw invalid_argument(fmt::format("simulated_device::{}: bytes must be > 0", what));
  std::lock_guard lock(mu_);
  if (bytes > capacity - used) return nullptr;
  void* p = std::aligned_alloc(host_alignment, round_up(bytes, host_alignment));
  if (p == nullptr) return nullptr;
  map.emplace(as_bytes(p), region{bytes, {}});
  used += bytes;
  return p;
}

void simulated_device::free_in(region_map& map, std::size_t& used, void* ptr, std::size_t bytes,
                               const char* what) noexcept {
  if (ptr == nullptr) return;
  std::unique_lock lock(mu_);
  wait_unused(lock, ptr, bytes);
  auto it = map.find(as_bytes(ptr));
  TP_CHECK(it != map.end(), "{}({}, {}): not allocated by this device", what, hex(ptr), bytes);
  TP_CHECK(it->second.bytes == bytes, "{}({}, {}): allocated with {} bytes", what, hex(ptr), bytes,
           it->second.bytes);
  map.erase(it);
  used -= bytes;
  std::free(ptr);
}

void* simulated_device::try_allocate(std::size_t bytes) {
  return allocate_in(device_allocs_, used_bytes_, opts_.capacity_bytes, bytes, "try_allocate");
}

void simulated_device::deallocate(void* ptr, std::size_t bytes) noexcept {
  free_in(device_allocs_, used_bytes_, ptr, bytes, "deallocate");
}

void* simulated_device::try_allocate_host(std::size_t bytes) {
  return allocate_in(host_allocs_, host_used_bytes_, opts_.host_capacity_bytes, bytes,
                     "try_allocate_host");
}

void simulated_device::deallocate_host(void* ptr, std::size_t bytes) noexcept {
  free_in(host_allocs_, host_used_bytes_, ptr, bytes, "deallocate_host");
}

memory_info simulated_device::memory() const {
  std::lock_guard lock(mu_);
  return {opts_.capacity_bytes - used_bytes_, opts_.capacity_bytes};
}

// --- virtual memory ----------------------------------------------------------

std::size_t simulated_device::granularity() const { return opts_.granularity; }

void* simulated_device::reserve(std::size_t bytes) {
  const std::size_t g = opts_.granularity;
  if (bytes == 0 || bytes % g != 0)
    throw invalid_argument(fmt::format(
        "simulated_device::reserve: {} bytes is not a positive multiple of the granularity {}",
        bytes, g));
  // Over-reserve by one granule, then trim both ends to a granule boundary.
  void* raw =
      mmap(nullptr, bytes + g, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED)
    throw error(fmt::format("simulated_device::reserve: mmap of {} bytes failed: {}", bytes + g,
                            std::strerror(errno)));
  auto* start = static_cast<std::byte*>(raw);
  auto* base = reinterpret_cast<std::byte*>(round_up(address(raw), g));
  const auto head = static_cast<std::size_t>(base - start);
  if (head != 0) munmap(start, head);
  if (g - head != 0) munmap(base + bytes, g - head);
  std::lock_guard lock(mu_);
  reservations_.emplace(base, region{bytes, std::vector<bool>(bytes / g, false)});
  return base;
}

void simulated_device::release(void* base, std::size_t bytes) noexcept {
  std::lock_guard lock(mu_);
  auto it = reservations_.find(as_bytes(base));
  TP_CHECK(it != reservations_.end() && it->second.bytes == bytes,
           "release({}, {}): not a reservation of this device", hex(base), bytes);
  TP_CHECK(
      std::none_of(it->second.mapped.begin(), it->second.mapped.end(), [](bool m) { return m; }),
      "release({}, {}): granules are still mapped", hex(base), bytes);
  reservations_.erase(it);
  munmap(base, bytes);
}

std::optional<simulated_device::granule_span> simulated_device::granules_of(const void* p,
                                                                            std::size_t bytes) {
  auto it = find_region(reservations_, p);
  if (it == reservations_.end()) return std::nullopt;
  const auto offset = static_cast<std::size_t>(as_bytes(p) - it->first);
  if (bytes > it->second.bytes - offset) return std::nullopt;
  const std::size_t g = opts_.granularity;
  const auto flag = [&](std::size_t i) {
    return it->second.mapped.begin() + static_cast<std::ptrdiff_t>(i);
  };
  return granule_span{flag(offset / g),
                      flag(bytes == 0 ? offset / g : (offset + bytes + g - 1) / g)};
}

bool simulated_device::try_map(void* ptr, std::size_t bytes) {
  const std::size_t g = opts_.granularity;
  std::lock_guard lock(mu_);
  const std::optional<granule_span> span = granules_of(ptr, bytes);
  if (!span || bytes == 0 || bytes % g != 0 || address(ptr) % g != 0)
    throw invalid_argument(
        fmt::format("simulated_device::try_map({}, {}): the range must be a positive multiple of "
                    "the granularity {}, aligned to it, inside one reservation",
                    hex(ptr), bytes, g));
  if (std::any_of(span->first, span->second, [](bool m) { return m; }))
    throw invalid_argument(fmt::format(
        "simulated_device::try_map({}, {}): part of the range is already mapped", hex(ptr), bytes));
  if (bytes > opts_.capacity_bytes - used_bytes_) return false;
  if (mprotect(ptr, bytes, PROT_READ | PROT_WRITE) != 0)
    throw error(
        fmt::format("simulated_device::try_map: mprotect failed: {}", std::strerror(errno)));
  std::fill(span->first, span->second, true);
  used_bytes_ += bytes;
  return true;
}

void simulated_device::unmap(void* ptr, std::size_t bytes) noexcept {
  const std::size_t g = opts_.granularity;
  std::unique_lock lock(mu_);
  wait_unused(lock, ptr, bytes);
  const std::optional<granule_span> span = granules_of(ptr, bytes);
  TP_CHECK(span && bytes != 0 && bytes % g == 0 && address(ptr) % g == 0,
           "unmap({}, {}): not a granule-aligned range inside one reservation", hex(ptr), bytes);
  TP_CHECK(std::all_of(span->first, span->second, [](bool m) { return m; }),
           "unmap({}, {}): part of the range is not mapped", hex(ptr), bytes);
  madvise(ptr, bytes, MADV_DONTNEED);
  mprotect(ptr, bytes, PROT_NONE);
  std::fill(span->first, span->second, false);
  used_bytes_ -= bytes;
}

bool simulated_device::copyable_range(const void* p, std::size_t bytes) {
  for (const region_map* map : {&device_allocs_, &host_allocs_}) {
    auto it = find_region(*map, p);
    if (it != map->end())
      return bytes <= it->second.bytes - static_cast<std::size_t>(as_bytes(p) - it->first);
  }
  if (find_region(reservations_, p) == reservations_.end()) return true;  // pageable host memory
  const std::optional<granule_span> span = granules_of(p, bytes);
  return span && std::all_of(span->first, span->second, [](bool m) { return m; });
}

void simulated_device::wait_unused(std::unique_lock<std::mutex>& lock, const void* p,
                                   std::size_t bytes) {
  bool waited = false;
  block_until(lock, [&]() -> std::optional<std::uintptr_t> {
    for (const auto& [id, s] : streams_)
      for (const op& o : s.ops)
        if (o.what == op::kind::copy &&
            (overlaps(p, bytes, o.dst, o.bytes) || overlaps(p, bytes, o.src, o.bytes))) {
          if (!waited) ++host_syncs_;  // a free that waits is a host synchronisation
          waited = true;
          return id;
        }
    return std::nullopt;
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
