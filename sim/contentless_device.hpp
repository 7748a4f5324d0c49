#pragma once
// contentless_device: a device adaptor (RMM's habit: a concern added by
// wrapping) that forwards everything to a simulated_device except the bytes
// of copies.
//
// Note [Deterministic addresses]
// The caching allocator orders free blocks by (size, address) and the
// policies prefer victims adjacent to the previous one, so addresses decide
// ties. simulated_device hands out aligned_alloc memory, whose addresses
// vary from run to run, which made two identical runs differ. This adaptor
// therefore serves try_allocate and try_allocate_host from two address-space
// reservations of its own (PROT_NONE, nothing committed: with copies
// without contents, no byte of device or pinned memory is ever touched), by
// bumping a pointer: addresses grow in allocation order, the same in every
// run. Freed ranges are not reused (the reservations are large enough for
// any trace here: reserve_bytes each); capacity is counted as the wrapped
// device counts it. Virtual memory (expandable segments) is served the same
// way: reserve() bumps a third, granule-aligned arena, and try_map/unmap
// only count mapped bytes against the capacity, since nothing ever touches
// the memory.
//
// Note [Copies without contents]
// A trace has sizes, not tensor values, so the simulator has nothing to
// preserve in a copy; but a simulated_device that moves bytes performs every
// copy with a real memmove when it retires, which for a multi-GiB trace
// commits GiBs of pages and spends most of a replay's wall time in memmove
// (measured: docs/decisions.md, Note [Copies without contents]). The
// wrapped device is therefore
// built with options::copy_contents = false (the constructor checks it):
// copy_async is forwarded with the same pointers, byte count, stream and
// order, so the copy's modelled duration, its events and the stream
// ordering are the simulated device's own, and no byte moves. Nothing else is
// changed: budgets, streams and events are the wrapped device's.
// Consequence: freeing memory does not wait for a copy that "reads" it, so
// callers must order frees after copy events themselves, which the runtime
// does (Note [Offload ordering] in transfer_engine.hpp).

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device/simulated_device.hpp"

namespace tp::sim {

/// Thread-safety: as the wrapped device. Lifetime: `inner` must outlive the
/// adaptor.
class contentless_device final : public device {
 public:
  /// Reserves the two address ranges; throws tp::error when mmap fails, and
  /// tp::invalid_argument when `inner` copies contents (Note [Copies without
  /// contents]).
  /// `capacity`, `host_capacity`: what try_allocate(_host) may hand out at once.
  contentless_device(simulated_device& inner, std::size_t capacity, std::size_t host_capacity);
  ~contentless_device() override;
  contentless_device(const contentless_device&) = delete;
  contentless_device& operator=(const contentless_device&) = delete;

  std::string name() const override { return inner_.name() + " (contentless copies)"; }
  /// Note [Deterministic addresses]. nullptr past capacity.
  void* try_allocate(std::size_t bytes) override { return device_.take(bytes); }
  void deallocate(void* ptr, std::size_t bytes) noexcept override { device_.give(ptr, bytes); }
  std::size_t granularity() const override { return inner_.granularity(); }
  /// Note [Deterministic addresses]: address space from an arena of its own.
  void* reserve(std::size_t bytes) override;
  void release(void* base, std::size_t bytes) noexcept override;
  /// Counts bytes against the capacity it shares with try_allocate; false
  /// when they do not fit. Nothing becomes accessible.
  bool try_map(void* ptr, std::size_t bytes) override;
  void unmap(void* ptr, std::size_t bytes) noexcept override;
  void* try_allocate_host(std::size_t bytes) override { return host_.take(bytes); }
  void deallocate_host(void* ptr, std::size_t bytes) noexcept override { host_.give(ptr, bytes); }
  stream_id create_stream() override { return inner_.create_stream(); }
  void destroy_stream(stream_id s) noexcept override { inner_.destroy_stream(s); }
  bool is_stream(stream_id s) const override { return inner_.is_stream(s); }
  void synchronize(stream_id s) override { inner_.synchronize(s); }
  void synchronize_device() override { inner_.synchronize_device(); }
  event_id create_event() override { return inner_.create_event(); }
  void destroy_event(event_id e) noexcept override { inner_.destroy_event(e); }
  void record_event(event_id e, stream_id s) override { inner_.record_event(e, s); }
  bool query_event(event_id e) override { return inner_.query_event(e); }
  void synchronize_event(event_id e) override { inner_.synchronize_event(e); }
  void stream_wait_event(stream_id s, event_id e) override { inner_.stream_wait_event(s, e); }
  event_id create_timing_event() override { return inner_.create_timing_event(); }
  std::optional<std::int64_t> elapsed_ns(event_id a, event_id b) override { return inner_.elapsed_ns(a, b); }
  memory_info memory() const override;

  /// Note [Copies without contents]: the same copy, and no byte moves.
  void copy_async(void* dst, const void* src, std::size_t bytes, stream_id stream) override {
    inner_.copy_async(dst, src, bytes, stream);
  }

 private:
  // One reservation served by a bump pointer (Note [Deterministic addresses]).
  class arena {
   public:
    /// Reserves `address_space` bytes (PROT_NONE); hands out at most
    /// `capacity` at once.
    arena(std::size_t capacity, const char* what, std::size_t address_space);
    ~arena();
    arena(const arena&) = delete;
    arena& operator=(const arena&) = delete;
    void* take(std::size_t bytes);
    void give(void* ptr, std::size_t bytes) noexcept;
    /// give() without the address check, for ranges handed out aligned.
    void forget(std::size_t bytes) noexcept;
    std::size_t used() const;
    std::size_t capacity() const { return capacity_; }

   private:
    mutable std::mutex mu_;
    std::byte* base_ = nullptr;
    std::size_t capacity_ = 0;
    std::size_t space_ = 0;  // bytes of address space reserved
    std::size_t next_ = 0;   // offset of the next range
    std::size_t used_ = 0;  // bytes handed out and not given back
  };

  simulated_device& inner_;
  arena device_;
  arena host_;
  arena reserved_;                      // address space for reserve()
  std::atomic<std::size_t> mapped_{0};  // bytes mapped by try_map
};

}  // namespace tp::sim
