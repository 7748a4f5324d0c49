#include "profiler/chunk_source.hpp"

#include <cstdint>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace tp::profiler {
namespace {

#if defined(__linux__)
constexpr std::size_t huge_page = std::size_t{2} << 20;
#endif

std::size_t mapped_bytes(std::size_t events) {
#if defined(__linux__)
  return (events * sizeof(event) + huge_page - 1) / huge_page * huge_page;
#else
  return events * sizeof(event);
#endif
}

/// Note [Chunk memory]: a 2 MiB-aligned, populated mapping.
void* map_chunk(std::size_t events) noexcept {
  const std::size_t bytes = mapped_bytes(events);
#if defined(__linux__)
  void* raw = mmap(nullptr, bytes + huge_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  // Trim the over-mapping to a 2 MiB-aligned range.
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + huge_page - 1) / huge_page * huge_page;
  if (aligned > start) munmap(raw, aligned - start);
  const std::uintptr_t end = start + bytes + huge_page;
  if (end > aligned + bytes) munmap(reinterpret_cast<void*>(aligned + bytes), end - (aligned + bytes));
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, bytes, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
  if (madvise(p, bytes, MADV_POPULATE_WRITE) == 0) return p;
#endif
  for (std::size_t off = 0; off < bytes; off += 4096) static_cast<volatile char*>(p)[off] = 0;
  return p;
#else
  return (::operator new(bytes, std::align_val_t{alignof(event)}, std::nothrow));
#endif
}

}  // namespace

chunk_source::chunk_source(std::size_t chunk_events, std::size_t limit, std::size_t spares)
    : chunk_events_(chunk_events), limit_(limit), spares_(spares) {
  if (spares_ > 0) filler_ = std::thread([this] { fill(); });
}

chunk_source::~chunk_source() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (filler_.joinable()) filler_.join();
  for (void* c : ready_) release(c, chunk_events_);
}

void chunk_source::release(void* chunk, std::size_t events) noexcept {
#if defined(__linux__)
  munmap(chunk, mapped_bytes(events));
#else
  (void)events;
  ::operator delete(chunk, std::align_val_t{alignof(event)});
#endif
}

void* chunk_source::take(std::size_t events) noexcept {
  {
    std::lock_guard lock(mutex_);
    if (events == chunk_events_ && !ready_.empty()) {
      void* c = ready_.back();
      ready_.pop_back();
      wake_.notify_one();
      return c;
    }
    ++promised_;  // may pass limit_ for a partial last chunk; only the filler heeds it
  }
  return map_chunk(events);
}

void chunk_source::fill() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || (ready_.size() < spares_ && promised_ < limit_); });
    if (stop_) return;
    ++promised_;
    lock.unlock();
    void* c = map_chunk(chunk_events_);
    lock.lock();
    if (c == nullptr) {
      --promised_;
      return;  // the host is out of memory: take() maps on demand from now on
    }
    if (stop_) {
      release(c, chunk_events_);
      return;
    }
    ready_.push_back(c);
  }
}

}  // namespace tp::profiler
