#pragma once
// simulated_device: the device interface over host memory, with no CUDA.
// Memory is real (bytes written can be read back); streams and events follow
// a deterministic discrete-event model driven by an injected tp::clock, so the
// allocator, the runtime and the trace simulator run and are tested on any
// machine, and a copy's cost can be measured without a GPU.
//
// Note [Simulated stream model]
// No worker threads. Each stream is a FIFO of ops: copy(dst, src, bytes),
// record(event), wait(event record) and work(duration) (enqueue_work: a
// kernel that moves nothing). An op retires (a copy's memmove
// happens only then) when all earlier ops of its stream have retired, its
// stream is not held (hold_stream), a wait op's awaited record has retired,
// and its modelled finish time is <= clock.now_ns(). The finish time is
//   max(finish of the previous op on the stream, enqueue time,
//       time of the last release_stream, finish of the awaited record)
//   + duration,
// where duration = latency_ns + ceil(bytes * 1e9 / bandwidth) for copies (0
// when bandwidth is 0), the given one for work, and 0 for records and waits. So a result depends only
// on the sequence of calls and clock readings, never on thread scheduling.
// Progress (poll) runs at the start of every call that touches streams,
// events or copies, repeatedly until nothing more can retire (a wait may
// unblock once another stream retires a record).
// Each record_event creates a new record (CUDA's "most recent record"): the
// event tracks the newest one, and stream_wait_event captures the one current
// at call time, so re-recording later does not move an earlier wait. A wait on
// a record that has already retired is a no-op (its finish is <= now, which is
// already the wait's earliest start).
// Blocking calls (synchronize, synchronize_event) loop: poll; if done,
// return; if the op that blocks them is (through waits, transitively) on a
// held stream, sleep on a condition variable until release_stream; otherwise
// call clock.wait_until(that op's finish time), which on a manual_clock jumps
// time forward and on a steady_clock sleeps. The device mutex is not held
// while blocking. A thread that blocks on a stream it holds itself deadlocks.
// deallocate and deallocate_host block the same way until no pending copy
// touches the memory, as cuda_device's deallocate does (it synchronizes, as
// cudaFree does). cuda_device's unmap does not wait: its caller waits for the
// streams that used the range (Note [Free waits for the device] in
// device/cuda/cuda_device.cpp). So an unmap that would have to wait for a
// copy ends the process here, as the fault it would be on a GPU.
// Ids are small integers that are never reused, so stale handles are caught.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/clock.hpp"
#include "device/device.hpp"

namespace tp {

/// A device backed by host memory with a deterministic stream model; see
/// Note [Simulated stream model]. Thread-safety: every member may be called
/// from any thread concurrently (one mutex guards all state). Unknown stream
/// or event ids throw tp::invalid_argument naming the id; a wrong pointer or
/// size passed to a noexcept member aborts with a message.
class simulated_device final : public device {
 public:
  /// Sizes and the copy-cost model. Validated by the constructor.
  struct options {
    /// Device memory: plain allocations and mapped granules share it.
    std::size_t capacity_bytes = std::size_t{8} << 30;
    /// Page-locked host memory (try_allocate_host) limit.
    std::size_t host_capacity_bytes = std::size_t{64} << 30;
    /// map/unmap granule: a power of two and a multiple of the OS page size.
    std::size_t granularity = std::size_t{2} << 20;
    /// Copy bandwidth; 0 means copies take no time beyond latency_ns.
    double bandwidth_bytes_per_s = 0.0;
    /// Fixed cost of every copy, >= 0.
    std::int64_t latency_ns = 0;
    /// Whether a retiring copy moves its bytes. false models the copy's
    /// duration, events and ordering only (the trace simulator has sizes, not
    /// values: Note [Copies without contents] in sim/contentless_device.hpp).
    bool copy_contents = true;
  };

  /// Builds a device with default options. clk must outlive the device.
  explicit simulated_device(clock& clk);
  /// Builds a device. clk must outlive the device. Throws
  /// tp::invalid_argument, naming the field, when opts is impossible.
  simulated_device(options opts, clock& clk);
  /// Frees every allocation, reservation and host buffer still live; work
  /// still pending on streams is dropped, not performed.
  ~simulated_device() override;
  simulated_device(const simulated_device&) = delete;
  simulated_device& operator=(const simulated_device&) = delete;

  /// "simulated".
  std::string name() const override;

  /// Host memory aligned to 512 bytes, counted against capacity_bytes.
  /// Throws tp::invalid_argument when bytes == 0.
  void* try_allocate(std::size_t bytes) override;
  /// First waits until no pending copy uses the memory, as cudaFree waits
  /// for the device (Note [Simulated stream model]). Aborts when (ptr, bytes)
  /// is not a live allocation. nullptr does nothing.
  void deallocate(void* ptr, std::size_t bytes) noexcept override;

  /// options::granularity.
  std::size_t granularity() const override;
  /// An inaccessible (PROT_NONE), granularity-aligned mmap region. Throws
  /// tp::invalid_argument for a size that is 0 or not a granule multiple,
  /// tp::error when mmap fails.
  void* reserve(std::size_t bytes) override;
  /// Aborts unless (base, bytes) is a reservation with no granule mapped.
  void release(void* base, std::size_t bytes) noexcept override;
  /// Makes the range readable and writable (it reads as zeros). Throws
  /// tp::invalid_argument when the range is misaligned, outside one
  /// reservation or already partly mapped.
  bool try_map(void* ptr, std::size_t bytes) override;
  /// Waits like deallocate, then discards the contents and makes the range
  /// inaccessible again. Aborts unless every granule in it is mapped.
  void unmap(void* ptr, std::size_t bytes) noexcept override;

  /// Host memory aligned to 512 bytes, counted against host_capacity_bytes.
  /// Throws tp::invalid_argument when bytes == 0.
  void* try_allocate_host(std::size_t bytes) override;
  /// Waits like deallocate. Aborts when (ptr, bytes) is not a live host
  /// buffer. nullptr does nothing.
  void deallocate_host(void* ptr, std::size_t bytes) noexcept override;

  /// A new stream; ids count up from 1 and are never reused.
  stream_id create_stream() override;
  /// The stream stops accepting work; its pending ops still retire. The
  /// default stream is ignored; an unknown id aborts.
  void destroy_stream(stream_id stream) noexcept override;
  /// True for default_stream and for created, not yet destroyed streams.
  bool is_stream(stream_id stream) const override;
  /// Returns when every op enqueued on stream before the call has retired;
  /// see Note [Simulated stream model] for how it waits.
  void synchronize(stream_id stream) override;
  /// Returns when every op enqueued on any stream before the call has
  /// retired; one host synchronisation.
  void synchronize_device() override;

  /// A new event; ids count up from 1 and are never reused.
  event_id create_event() override;
  /// Pending records of the event still retire. An unknown id aborts.
  void destroy_event(event_id event) noexcept override;
  /// Enqueues a new record on stream; the event now tracks it.
  void record_event(event_id event, stream_id stream) override;
  /// True when the event was never recorded or its newest record retired.
  bool query_event(event_id event) override;
  /// Returns once query_event would return true, blocking as synchronize.
  void synchronize_event(event_id event) override;
  /// Enqueues on stream a wait for the event's newest record; nothing when
  /// that record has retired or the event was never recorded.
  void stream_wait_event(stream_id stream, event_id event) override;
  /// The modelled time between the two records' finishes (every event here
  /// can time). nullopt when the device has no copy model (bandwidth and
  /// latency 0, as behind the CPU adapter): its copies take no time, which
  /// says nothing of a link. Throws tp::invalid_argument when either event
  /// has no complete record.
  std::optional<std::int64_t> elapsed_ns(event_id start, event_id end) override;

  /// The bytes move when the op retires. Throws tp::invalid_argument when
  /// [dst, dst + bytes) or [src, src + bytes) starts in an allocation or host
  /// buffer of this device and runs past its end, or starts in a reservation
  /// and touches an unmapped granule. Memory this device does not know is
  /// taken to be pageable host memory and accepted, as CUDA accepts it.
  void copy_async(void* dst, const void* src, std::size_t bytes, stream_id stream) override;

  /// free = capacity_bytes - (allocated + mapped bytes), total = capacity.
  memory_info memory() const override;

  // --- hooks for tests and the trace simulator -------------------------------
  // They accept a destroyed stream whose ops have not all retired yet.

  /// Stops stream from retiring ops, as if its current op were a copy still
  /// in flight. Holding a held stream does nothing.
  void hold_stream(stream_id stream);
  /// Lets stream retire ops again; they start no earlier than now. Wakes
  /// threads blocked on it.
  void release_stream(stream_id stream);
  /// Ops enqueued on stream that have not retired.
  std::size_t pending_ops(stream_id stream);
  /// Retires every op that can retire at clock.now_ns().
  void poll();
  /// Enqueues on stream an op that moves nothing and takes duration_ns once
  /// it starts: a kernel of known length. The trace simulator runs each
  /// operator's recorded time this way, so device time and host time are
  /// apart (Note [Simulated time] in sim/simulator.hpp). Throws
  /// tp::invalid_argument for a negative duration or an unknown stream.
  void enqueue_work(stream_id stream, std::int64_t duration_ns);
  /// Host synchronisations so far: calls to synchronize and
  /// synchronize_event (each one, whether or not it had to wait), and frees
  /// that had to wait for a pending copy (an unmap that would ends the
  /// process: see the top of this file). On CUDA every one of
  /// them stops the host from queueing work ahead, so a steady state that
  /// needs none is a property worth testing.
  std::uint64_t host_syncs() const;
  /// The options the device was built with.
  const options& opts() const { return opts_; }

 private:
  static constexpr std::int64_t never_ns = std::numeric_limits<std::int64_t>::min();

  struct record {  // one record_event call
    std::uintptr_t stream = 0;
    bool retired = false;
    std::int64_t finish_ns = 0;  // valid once retired
  };
  struct op {
    enum class kind { copy, record, wait, work } what = kind::copy;
    void* dst = nullptr;
    const void* src = nullptr;
    std::size_t bytes = 0;
    std::int64_t duration_ns = 0;
    std::shared_ptr<record> rec{};  // the record made (record) or awaited (wait)
    std::int64_t enqueue_ns = 0;    // set by enqueue
  };
  struct stream_state {
    std::deque<op> ops;
    bool held = false;
    bool destroyed = false;  // erased once ops drain
    std::int64_t release_ns = never_ns;
    std::int64_t last_finish_ns = never_ns;
    std::uint64_t enqueued = 0;
    std::uint64_t retired = 0;
  };
  struct event_state {
    std::shared_ptr<record> latest;  // null: never recorded
  };
  struct region {
    std::size_t bytes = 0;
    std::vector<bool> mapped;  // per granule; empty for plain/host regions
  };
  using region_map = std::map<const std::byte*, region>;
  using granule_span = std::pair<std::vector<bool>::iterator, std::vector<bool>::iterator>;

  // Private members require mu_ held, except allocate_in and free_in, which take it.
  void retire_ready();
  // The head op's modelled finish, or nullopt while it cannot start.
  static std::optional<std::int64_t> head_finish(const stream_state& s);
  // Polls, then while blocker() names a stream that must make progress
  // first, waits for that stream's next retirement; see
  // Note [Simulated stream model]. Unlocks lock while waiting.
  template <class Blocker>
  void block_until(std::unique_lock<std::mutex>& lock, Blocker blocker);
  std::optional<std::int64_t> blocking_finish(std::uintptr_t stream) const;
  stream_state& live_stream(stream_id stream);
  stream_state& any_stream(stream_id stream);
  event_state& live_event(event_id event);
  void enqueue(stream_state& s, op o);
  void* allocate_in(region_map& map, std::size_t& used, std::size_t capacity, std::size_t bytes,
                    const char* what);
  void free_in(region_map& map, std::size_t& used, void* ptr, std::size_t bytes,
               const char* what) noexcept;
  // The mapped flags of the granules [p, p + bytes) touches, or nullopt when
  // the range does not lie in one reservation.
  std::optional<granule_span> granules_of(const void* p, std::size_t bytes);
  // False when copy_async must reject the range; see its comment.
  bool copyable_range(const void* p, std::size_t bytes);
  // Blocks until no pending copy reads or writes [p, p + bytes).
  // The stream of a queued copy that reads or writes [p, p + bytes), if any.
  std::optional<std::uintptr_t> copy_using(const void* p, std::size_t bytes) const;
  void wait_unused(std::unique_lock<std::mutex>& lock, const void* p, std::size_t bytes);

  const options opts_;
  clock& clock_;
  mutable std::mutex mu_;
  std::condition_variable released_;
  std::size_t used_bytes_ = 0;
  std::size_t host_used_bytes_ = 0;
  region_map device_allocs_;
  region_map host_allocs_;
  region_map reservations_;
  std::map<std::uintptr_t, stream_state> streams_;
  std::map<std::uintptr_t, event_state> events_;
  std::uintptr_t next_stream_ = 1;
  std::uintptr_t next_event_ = 1;
  std::uint64_t host_syncs_ = 0;
};

}  // namespace tp
