// The stand-in CUDA driver's streams and events (fake_libcuda.cpp says what
// the library models): handles checked against their context; every call
// completes before it returns, so an event is complete once recorded.

#include "tests/device/fake_libcuda_state.hpp"

namespace tp_fake_cuda {

CUresult CUDAAPI stream_create(CUstream* h, unsigned int flags) {
  state_t& s = state();
  if (CUresult r = enter_ctx(s); r != CUDA_SUCCESS) return r;
  if (flags > CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
  lock l(s.mutex);
  auto* st = new stream_st{current};
  s.streams.insert(st);
  *h = reinterpret_cast<CUstream>(st);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI stream_destroy(CUstream h) {
  state_t& s = state();
  if (CUresult r = enter_ctx(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  auto* st = reinterpret_cast<stream_st*>(h);
  if (h == nullptr || s.streams.erase(st) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete st;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI stream_synchronize(CUstream h) {
  state_t& s = state();
  s.stream_synchronizes.fetch_add(1);
  if (CUresult r = enter_ctx(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  return stream_ctx(s, h) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI stream_wait_event(CUstream h, CUevent e, unsigned int flags) {
  state_t& s = state();
  if (CUresult r = enter_ctx(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  if (flags != 0 || s.events.count(reinterpret_cast<event_st*>(e)) == 0) return CUDA_ERROR_INVALID_HANDLE;
  // The event may be of another context; the stream must be usable here.
  return stream_ctx(s, h) == current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI event_create(CUevent* e, unsigned int flags) {
  state_t& s = state();
  if (CUresult r = enter_ctx(s); r != CUDA_SUCCESS) return r;
  if ((flags & ~0x7u) != 0) return CUDA_ERROR_INVALID_VALUE;
  lock l(s.mutex);
  auto* ev = new event_st{current, (flags & CU_EVENT_DISABLE_TIMING) == 0};
  s.events.insert(ev);
  *e = reinterpret_cast<CUevent>(ev);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI event_destroy(CUevent e) {
  state_t& s = state();
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  auto* ev = reinterpret_cast<event_st*>(e);
  if (s.events.erase(ev) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete ev;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI event_record(CUevent e, CUstream h) {
  state_t& s = state();
  if (CUresult r = enter_ctx(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  auto* ev = reinterpret_cast<event_st*>(e);
  if (s.events.count(ev) == 0) return CUDA_ERROR_INVALID_HANDLE;
  context_st* c = stream_ctx(s, h);
  if (c == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return c == ev->ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;  // "must be from the same context"
}

CUresult CUDAAPI event_query(CUevent e) {
  state_t& s = state();
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  return s.events.count(reinterpret_cast<event_st*>(e)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI event_synchronize(CUevent e) { return event_query(e); }

// Every call completes before it returns: no time passes between records.
// As CUDA, both events must keep time.
CUresult CUDAAPI event_elapsed_time(float* ms, CUevent start, CUevent end) {
  state_t& s = state();
  if (CUresult r = enter_ctx(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  for (CUevent e : {start, end}) {
    auto* ev = reinterpret_cast<event_st*>(e);
    if (s.events.count(ev) == 0 || !ev->timing) return CUDA_ERROR_INVALID_HANDLE;
  }
  *ms = 0;
  return CUDA_SUCCESS;
}

}  // namespace tp_fake_cuda
