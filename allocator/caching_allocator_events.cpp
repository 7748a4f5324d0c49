// caching_allocator: stream-ordered frees (Note [Stream-ordered reuse]). A
// block freed after record_stream() waits for an event on each stream that
// used it; the lock is held unless a comment says otherwise.

#include <algorithm>
#include <cstdio>
#include <exception>
#include <vector>

#include "allocator/caching_allocator.hpp"

namespace tp {

using detail::block;

// Note [A free that cannot record its events]
// deallocate() is noexcept (a DataPtr's deleter must not throw), yet after a
// sticky device fault (an illegal address, say) recording an event fails.
// Then nothing can tell when the other streams are done with the block, so
// it is quarantined: it stays "pending free" with no event to wait for, is
// never reused, merged or returned, and its segment stays reserved. The
// process learns of the fault from its next CUDA call anyway; this only
// keeps the free from ending it (std::terminate) or from handing out memory
// a stream may still use. One line on stderr says so, once per allocator.
void caching_allocator::insert_events(block* b) {
  for (const stream_id s : b->stream_uses) {
    event_id e{};
    bool taken = false;
    try {
      e = events_.take();
      taken = true;
      device_.record_event(e, s);
    } catch (const std::exception& err) {
      if (taken) events_.give(e);
      ++b->pending_events;  // never completed: Note [A free that cannot record its events]
      if (!quarantine_reported_) {
        quarantine_reported_ = true;
        std::fprintf(stderr,
                     "tensorpager: a freed block of %zu bytes is kept out of use for good: recording its event on "
                     "another stream failed (%s)\n",
                     b->size, err.what());
      }
      continue;
    }
    auto it = std::find_if(pending_.begin(), pending_.end(), [s](const auto& p) { return p.first == s; });
    if (it == pending_.end()) it = pending_.insert(pending_.end(), {s, {}});
    it->second.push_back({e, b});
    ++b->pending_events;
    ++pending_count_;
  }
  b->stream_uses.clear();
}

void caching_allocator::process_events() {
  if (pending_count_ == 0) return;
  for (auto& [stream, queue] : pending_) {
    // Events on one stream complete in the order they were recorded.
    while (!queue.empty() && device_.query_event(queue.front().event)) {
      const pending_event p = queue.front();
      queue.pop_front();
      --pending_count_;
      events_.give(p.event);
      if (--p.block->pending_events == 0) free_block(p.block, allocator_event_kind::free_completed);
    }
  }
}

// Waits, with the lock released, for every event pending now; see Note [Reclaim].
void caching_allocator::wait_for_pending_events(lock_type& lock) {
  process_events();
  if (pending_count_ == 0) return;
  ++stats_.num_sync_all_streams;
  std::vector<event_id> waits;
  waits.reserve(pending_count_);
  for (const auto& [stream, queue] : pending_) {
    for (const pending_event& p : queue) waits.push_back(p.event);
  }
  // Events are pooled and never destroyed while the allocator lives, so the
  // ids stay valid; one re-recorded meanwhile only makes the wait longer.
  lock.unlock();
  for (event_id e : waits) device_.synchronize_event(e);
  lock.lock();
  process_events();
}

}  // namespace tp
