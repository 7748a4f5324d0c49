// The parts of PyTorch's CUDA allocator interface tensorpager does not
// implement. Each throws c10::NotImplementedError (Python: NotImplementedError)
// naming the feature and the way out.
//
// Note [Unsupported features]
// With backend:tensorpager, these PyTorch features raise NotImplementedError:
//
// - CUDA graphs and private memory pools: torch.cuda.graph / CUDAGraph
//   capture, torch.compile(mode="reduce-overhead"), torch.cuda.MemPool and
//   torch.cuda.use_mem_pool (beginAllocateToPool, endAllocateToPool,
//   releasePool, createOrIncrefPool, getPoolUseCount, setUseOnOOM,
//   setNoSplit, checkPoolLiveAllocations, getCheckpointState,
//   setCheckpointPoolState).
// - Sharing CUDA tensors between processes: torch.multiprocessing with CUDA
//   tensors, CUDA IPC handles (shareIpcHandle, getIpcDevPtr).
// - PyTorch's allocation history: torch.cuda.memory._record_memory_history
//   (recordHistory with enabled=True; disabling it is accepted). tensorpager's
//   own timeline (key `timeline`) records allocations instead.
//
// Supported with limits: attachAllocatorTraceTracker trackers receive ALLOC,
// FREE_REQUESTED, SEGMENT_ALLOC, SEGMENT_FREE and OOM entries, but no
// FREE_COMPLETED (nor SEGMENT_MAP/UNMAP: an expandable segment's mapped
// ranges arrive as SEGMENT_ALLOC/SEGMENT_FREE); snapshot() carries no
// traces or stack frames; enable(false) releases cached memory after every
// free. The row-by-row comparison with PyTorch's allocator is
// docs/cuda_adapter_review.md.
//
// To use any of these, leave PyTorch's allocator in charge: unset
// backend:tensorpager in PYTORCH_CUDA_ALLOC_CONF (or do not install
// tensorpager).

#include "hooks/cuda_adapter.hpp"

#include <c10/util/Exception.h>

namespace tp::hooks {
namespace {

[[noreturn]] void unsupported(const char* feature) {
  C10_THROW_ERROR(NotImplementedError,
                  std::string("tensorpager does not support ") + feature +
                      "; unset backend:tensorpager in PYTORCH_CUDA_ALLOC_CONF to use PyTorch's allocator");
}

constexpr const char* graphs = "CUDA graphs and private memory pools (torch.cuda.graph, torch.cuda.MemPool)";
constexpr const char* ipc = "sharing CUDA tensors between processes (CUDA IPC handles)";

}  // namespace

void cuda_adapter::beginAllocateToPool(c10::DeviceIndex, c10::MempoolId_t, std::function<bool(cudaStream_t)>) {
  unsupported(graphs);
}

void cuda_adapter::endAllocateToPool(c10::DeviceIndex, c10::MempoolId_t) { unsupported(graphs); }

void cuda_adapter::releasePool(c10::DeviceIndex, c10::MempoolId_t) { unsupported(graphs); }

int cuda_adapter::getPoolUseCount(c10::DeviceIndex, c10::MempoolId_t) { unsupported(graphs); }

void cuda_adapter::createOrIncrefPool(c10::DeviceIndex, c10::MempoolId_t, std::shared_ptr<CUDAAllocator>) {
  unsupported(graphs);
}

void cuda_adapter::setUseOnOOM(c10::DeviceIndex, c10::MempoolId_t, bool) { unsupported(graphs); }

void cuda_adapter::setNoSplit(c10::DeviceIndex, c10::MempoolId_t) { unsupported(graphs); }

bool cuda_adapter::checkPoolLiveAllocations(c10::DeviceIndex, c10::MempoolId_t, const std::unordered_set<void*>&) {
  unsupported(graphs);
}

std::shared_ptr<cuda_adapter::AllocatorState> cuda_adapter::getCheckpointState(c10::DeviceIndex, c10::MempoolId_t) {
  unsupported(graphs);
}

cuda_adapter::CheckpointDelta cuda_adapter::setCheckpointPoolState(c10::DeviceIndex,
                                                                   std::shared_ptr<AllocatorState>) {
  unsupported(graphs);
}

cuda_adapter::ShareableHandle cuda_adapter::shareIpcHandle(void*) { unsupported(ipc); }

std::shared_ptr<void> cuda_adapter::getIpcDevPtr(std::string) { unsupported(ipc); }

void cuda_adapter::recordHistory(bool enabled, c10::CachingDeviceAllocator::CreateContextFn, std::size_t,
                                 c10::CachingDeviceAllocator::RecordContext, bool,
                                 const std::vector<std::string>&) {
  if (!enabled) return;  // turning history off is what it already is
  unsupported("recording allocation history (torch.cuda.memory._record_memory_history); tensorpager's "
              "timeline key records allocations instead");
}

}  // namespace tp::hooks
