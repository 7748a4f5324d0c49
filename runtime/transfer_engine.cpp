#include "runtime/transfer_engine.hpp"

#include <cstdio>
#include <exception>

#include "core/errors.hpp"

namespace tp {

transfer_engine::transfer_engine(device& dev, runtime_allocator& alloc, pinned_host_pool& pool,
                                 std::optional<stream_id> offload_stream,
                                 std::optional<stream_id> prefetch_stream, bandwidth_model copy_seed)
    : dev_(dev),
      alloc_(alloc),
      pool_(pool),
      offload_(offload_stream ? *offload_stream : dev.create_stream()),
      prefetch_(prefetch_stream ? *prefetch_stream : dev.create_stream()),
      own_offload_(!offload_stream),
      own_prefetch_(!prefetch_stream),
      costs_(copy_seed) {}

transfer_engine::~transfer_engine() {
  for (const deferred_free& d : deferred_) {
    try {
      dev_.synchronize_event(d.event);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tensorpager: waiting for a copy at shutdown failed: %s\n", e.what());
    }
    try {
      pool_.deallocate(d.host);
    } catch (const std::exception&) {
    }
  }
  if (own_offload_) dev_.destroy_stream(offload_);
  if (own_prefetch_) dev_.destroy_stream(prefetch_);
  // events_ destroys its events after this body, so after these streams; a
  // destroyed stream's pending records still complete (device::destroy_stream).
}

bool transfer_engine::start_offload(managed_tensor& t) {
  host_block host;
  try {
    host = pool_.allocate(t.bytes);
  } catch (const out_of_memory&) {
    ++stats_.host_pool_refusals;
    return false;
  }
  wait_for_users(t, offload_);  // Note [Offload ordering], step (1)
  timer_.time(offload_, copy_direction::to_host, t.bytes,
              [&] { dev_.copy_async(host.ptr, t.binding->device_ptr(), t.bytes, offload_); });
  t.copy_event = events_.take();
  t.has_copy_event = true;
  dev_.record_event(t.copy_event, offload_);
  t.host = host;
  t.move_to(tensor_state::offloading);
  ++stats_.offloads;
  notify(runtime_event_kind::offload_begin, t, offload_);
  return true;
}

bool transfer_engine::try_complete_offload(managed_tensor& t) {
  if (!dev_.query_event(t.copy_event)) return false;
  notify(runtime_event_kind::offload_end, t, offload_);  // before release: the block's address
  t.binding->release_device();
  events_.give(t.copy_event);
  t.has_copy_event = false;
  t.move_to(tensor_state::on_host);
  stats_.offloaded_bytes += t.bytes;
  return true;
}

void transfer_engine::release_behind(managed_tensor& t, stream_id stream) {
  void* p = t.binding->device_ptr();
  if (p != nullptr && alloc_.allocation_size(p) != 0) {
    alloc_.record_stream(p, stream);  // Note [Offload ordering]
    return;
  }
  dev_.synchronize_event(t.copy_event);  // memory the allocator cannot guard: only the host can wait
  ++stats_.host_waits;
}

void transfer_engine::wait_for_users(managed_tensor& t, stream_id waiter) {
  const event_id ready = events_.take();
  const auto wait_for = [&](stream_id user) {
    dev_.record_event(ready, user);
    dev_.stream_wait_event(waiter, ready);  // captures this record: the event is free again
  };
  try {
    wait_for(t.stream);
    for (const stream_id s : t.other_streams) wait_for(s);
  } catch (...) {
    events_.give(ready);
    throw;
  }
  events_.give(ready);
}

void transfer_engine::release_dropped(managed_tensor& t) {
  void* p = t.binding->device_ptr();
  if (p != nullptr && alloc_.allocation_size(p) != 0) {
    // The block's own stream orders its reuse already; record_stream ignores it.
    alloc_.record_stream(p, t.stream);
    for (const stream_id s : t.other_streams) alloc_.record_stream(p, s);
  } else if (p != nullptr && !t.other_streams.empty()) {
    dev_.synchronize(t.stream);  // memory the allocator cannot guard: only the host can wait
    for (const stream_id s : t.other_streams) dev_.synchronize(s);
    ++stats_.host_waits;
  }
  t.binding->release_device();
}

void transfer_engine::release_offloading(managed_tensor& t) {
  notify(runtime_event_kind::offload_end, t, offload_);  // before release: the block's address
  release_behind(t, offload_);
  t.binding->release_device();
  t.move_to(tensor_state::on_host);
  stats_.offloaded_bytes += t.bytes;
  settle(t);
}

bool transfer_engine::settle(managed_tensor& t) {
  if (t.has_copy_event && dev_.query_event(t.copy_event)) {
    events_.give(t.copy_event);
    t.has_copy_event = false;
  }
  return !t.has_copy_event;
}

void transfer_engine::defer_host_free(managed_tensor& t) {
  deferred_.push_back({t.copy_event, t.host.ptr});
  t.has_copy_event = false;
  t.host = {};
}

void transfer_engine::cancel_offload(managed_tensor& t) {
  notify(runtime_event_kind::offload_end, t, offload_, 1);
  defer_host_free(t);
  t.move_to(tensor_state::resident);
  ++stats_.cancelled_offloads;
}

void transfer_engine::start_prefetch(managed_tensor& t) {
  void* dst = t.binding->allocate_device(t.bytes, t.stream);
  const event_id ready = events_.take();
  dev_.record_event(ready, t.stream);
  dev_.stream_wait_event(prefetch_, ready);
  events_.give(ready);
  if (t.has_copy_event) {
    // An offload released stream-ordered may still be writing the host copy.
    dev_.stream_wait_event(prefetch_, t.copy_event);
    events_.give(t.copy_event);
    t.has_copy_event = false;
  }
  timer_.time(prefetch_, copy_direction::to_device, t.bytes,
              [&] { dev_.copy_async(dst, t.host.ptr, t.bytes, prefetch_); });
  t.copy_event = events_.take();
  t.has_copy_event = true;
  dev_.record_event(t.copy_event, prefetch_);
  t.move_to(tensor_state::prefetching);
  ++stats_.prefetches;
  stats_.prefetched_bytes += t.bytes;
  notify(runtime_event_kind::prefetch_begin, t, prefetch_);
}

bool transfer_engine::copy_done(managed_tensor& t) { return dev_.query_event(t.copy_event); }


void transfer_engine::finish_prefetch(managed_tensor& t, stream_id compute, std::int64_t late_since_ns) {
  dev_.stream_wait_event(compute, t.copy_event);
  if (compute != t.stream) dev_.stream_wait_event(t.stream, t.copy_event);
  for (const stream_id s : t.other_streams) {
    if (s != compute) dev_.stream_wait_event(s, t.copy_event);  // Note [Tensors used on several streams]
  }
  defer_host_free(t);
  if (late_since_ns >= 0 && observer_ != nullptr) {  // Note [Late copies]
    deferred_free& d = deferred_.back();
    d.late_since_ns = late_since_ns;
    d.stall.kind = runtime_event_kind::stall;
    d.stall.tensor = t.id;
    d.stall.address = reinterpret_cast<std::uintptr_t>(t.binding->device_ptr());
    d.stall.stream = compute;
  }
  t.move_to(tensor_state::resident);
  notify(runtime_event_kind::prefetch_end, t, prefetch_);
}

void transfer_engine::cancel_prefetch(managed_tensor& t) {
  notify(runtime_event_kind::prefetch_end, t, prefetch_, 1);
  release_behind(t, prefetch_);
  t.binding->release_device();
  t.move_to(tensor_state::on_host);
  ++stats_.cancelled_prefetches;
  settle(t);  // the host block stays; the copy may still read it
}

void transfer_engine::discard(managed_tensor& t) noexcept {
  // An untracked tensor's copy ends here: close its slice (Note [Runtime events]).
  try {
    if (t.state() == tensor_state::offloading || t.state() == tensor_state::prefetching) {
      const bool out = t.state() == tensor_state::offloading;
      notify(out ? runtime_event_kind::offload_end : runtime_event_kind::prefetch_end, t,
             out ? offload_ : prefetch_, 1);
      // The binding frees the device storage after this: behind the copy.
      if (t.has_copy_event) release_behind(t, out ? offload_ : prefetch_);
    }
    if (t.has_copy_event && t.host.ptr != nullptr) {
      defer_host_free(t);
    } else {
      if (t.has_copy_event) events_.give(t.copy_event);
      t.has_copy_event = false;
      if (t.host.ptr != nullptr) pool_.deallocate(t.host.ptr);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tensorpager: discarding a tensor's transfer failed: %s\n", e.what());
  }
  t.host = {};
}

void transfer_engine::emit(runtime_event_kind kind, const managed_tensor& t, stream_id stream,
                           std::int64_t detail) noexcept {
  runtime_event e;
  e.kind = kind;
  e.tensor = t.id;
  e.address = reinterpret_cast<std::uintptr_t>(t.binding->device_ptr());
  e.bytes = t.bytes;
  e.stream = stream;
  e.detail = detail;
  try {
    e.host_bytes = static_cast<std::int64_t>(pool_.stats().in_use_bytes);
  } catch (...) {
    e.host_bytes = -1;  // pool_.stats() takes a mutex; a failure only loses the figure
  }
  observer_->on_event(e);
}

void transfer_engine::poll(std::int64_t now_ns) {
  std::size_t kept = 0;
  for (std::size_t i = 0; i < deferred_.size(); ++i) {
    if (dev_.query_event(deferred_[i].event)) {
      if (deferred_[i].late_since_ns >= 0 && observer_ != nullptr) {
        runtime_event e = deferred_[i].stall;
        e.detail = now_ns - deferred_[i].late_since_ns;
        observer_->on_event(e);
      }
      pool_.deallocate(deferred_[i].host);
      events_.give(deferred_[i].event);
    } else {
      deferred_[kept++] = deferred_[i];
    }
  }
  deferred_.resize(kept);
  timer_.collect(costs_);
}

std::optional<std::size_t> transfer_engine::host_room() const {
  const std::optional<std::size_t> budget = pool_.budget();
  if (!budget || pool_.fallback() != host_fallback::error) return std::nullopt;
  const std::size_t in_use = pool_.stats().in_use_bytes;
  return *budget > in_use ? *budget - in_use : 0;
}

}  // namespace tp
