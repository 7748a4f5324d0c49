#pragma once
// tensorpager for LibTorch programs: put tensorpager's allocator behind
// PyTorch, read its statistics, change its budget. Link tp_hooks. This header
// includes no torch header. The Python extension (tensorpager._C) is a thin
// layer over these functions.
//
//   int main() {
//     tensorpager::install("budget:12GiB");        // before the first CUDA tensor
//     tensorpager::budget_scope scope(8ull << 30);  // a tighter budget for a while
//     ...
//     std::cout << tensorpager::memory_summary();
//   }
//
// Thread-safety: every function may be called from any thread. install() and
// uninstall() are serialised with each other; the others read whatever is
// installed when they run.
// Errors: tp::config_error for a malformed or conflicting configuration,
// tp::invalid_argument for a request that cannot be met (nothing changes),
// tp::error when tensorpager is not installed (see each function) or the
// device fails. Inside torch ops an exhausted budget surfaces as
// c10::OutOfMemoryError (Python: torch.OutOfMemoryError).

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "allocator/snapshot.hpp"

namespace tensorpager {

/// Installs tensorpager as PyTorch's allocator for the device the
/// configuration names (key `device`: `cuda`, the default, or `cpu`, a
/// simulated device of `sim_capacity` bytes behind torch's CPU allocator).
/// `conf` uses the grammar of PYTORCH_CUDA_ALLOC_CONF (Note [Configuration
/// grammar] in config/config.hpp); when it is empty the environment
/// variable TENSORPAGER_CONF is read instead (unset: every default). A ratio
/// budget ("0.6") is that share of the device's total memory.
///
/// With `backend` other than tensorpager it does nothing: PyTorch's allocator
/// stays. Installing again with an equal configuration does nothing; with a
/// different one it throws tp::config_error (uninstall() first, or change
/// the budget with set_budget()).
///
/// CUDA: must run before PyTorch's own CUDA allocator holds memory (throws
/// tp::config_error otherwise); a build without TP_WITH_CUDA throws
/// tp::config_error for device:cuda. Installing makes no CUDA call: the
/// driver is loaded, and a missing GPU reported, at the first CUDA
/// allocation (Note [No CUDA call before the first allocation] in
/// hooks/cuda_adapter.cpp). CPU: tensors allocated before install keep being
/// freed by the allocator that made them.
void install(const std::string& conf = "");

/// Gives PyTorch back the CPU allocator install() replaced (device:cpu only);
/// tensors allocated meanwhile stay valid and are freed by tensorpager when
/// they die. Does nothing when nothing is installed. Throws tp::error for an
/// installed CUDA adapter: PyTorch cannot switch CUDA allocators while
/// tensors live.
void uninstall();

/// Whether install() has put tensorpager in place (and uninstall() has not
/// removed it).
bool is_installed();

/// The installed configuration as text that install() accepts (non-default
/// keys only, so "" for all defaults), or "" when nothing is installed.
std::string current_config();

/// "cpu" or "cuda": the device kind of the installed adapter. Throws
/// tp::error when nothing is installed.
std::string device_kind();

/// The current device's statistics under torch.cuda.memory_stats()' key
/// names ("allocated_bytes.all.current", ...), plus "tensorpager.*" keys.
/// Throws tp::error when nothing is installed.
std::map<std::string, std::int64_t> stats();

/// A text table of the current device's memory, laid out like
/// torch.cuda.memory_summary(). Throws tp::error when nothing is installed.
std::string memory_summary();

/// Sets the budget of every device to `bytes` (nullopt: no budget). Cached
/// free memory is released as needed; throws tp::invalid_argument, keeping
/// the old budget, when memory in use already exceeds `bytes`. Throws
/// tp::error when nothing is installed.
void set_budget(std::optional<std::size_t> bytes);

/// The current device's budget in bytes, nullopt when there is none. Throws
/// tp::error when nothing is installed.
std::optional<std::size_t> budget();

/// Returns every cached free segment to the device (torch.cuda.empty_cache()).
/// Throws tp::error when nothing is installed.
void empty_cache();

/// Resets the current device's peak statistics to their current values.
/// Throws tp::error when nothing is installed.
void reset_peak_stats();

/// The current device's segments and blocks, by address. Throws tp::error
/// when nothing is installed.
std::vector<tp::segment_snapshot> snapshot();

// --- CUDA bring-up (scripts/gpu_check.sh and the tests of import and fork) ---

/// CUDA driver calls the installed CUDA adapter has made in this process: 0
/// until its first allocation, and 0 when tensorpager is not installed on
/// CUDA. Thread-safe.
std::uint64_t cuda_driver_calls();

/// Opens CUDA device `ordinal` through the installed CUDA adapter's driver
/// (loading it, as the first allocation would) and returns its name, without
/// keeping it open. Throws tp::cuda_error "no CUDA device: ..." when there is
/// no driver or no such device, tp::error when tensorpager is not installed
/// on CUDA.
std::string cuda_device_name(int ordinal);

// --- memory timelines (hooks/profiler_glue.cpp; docs/timelines.md) ----------

/// Starts recording the installed allocator's events into a new event log of
/// at most max_events events (0: the `timeline_events` key, 1 Mi events by
/// default, 80 MiB at most); a recording in progress is replaced.
/// The `timeline:PATH` key starts one at install and dumps it to PATH at
/// exit. Throws tp::error when nothing is installed.
void start_timeline(std::size_t max_events = 0);

/// Stops recording; the events so far stay available to dump_timeline().
/// Does nothing when not recording.
void stop_timeline();

/// Whether a timeline is being recorded.
bool timeline_recording();

/// Writes the current (or last) recording to path, in the format its
/// extension names: .json (Perfetto / chrome://tracing), .pickle (PyTorch's
/// memory_viz), .html (a self-contained page), .txt (a text report); top_n
/// rows in the largest-blocks tables. Throws tp::invalid_argument for another
/// extension, tp::error when nothing was recorded or the file cannot be
/// written. Safe while recording continues.
void dump_timeline(const std::string& path, std::size_t top_n = 20);

/// The text report of the current (or last) recording (what a .txt dump
/// holds). Throws tp::error when nothing was recorded.
std::string timeline_report(std::size_t top_n = 20);

/// Records a step boundary (the end of training step `index`) into the
/// current recording; does nothing when not recording.
void mark_step(std::int64_t index);

// --- training under a budget (hooks/budget/; README, "Training under a budget") ----

/// What a budget_scope manages. A value.
struct budget_options {
  /// The budget in bytes; with neither bytes nor ratio the runtime tracks
  /// and evicts nothing until set_budget() gives it one.
  std::optional<std::size_t> bytes;
  /// A share in (0, 1] of the first step's peak reserved bytes, set at the
  /// first step() (Note [Ratio budgets] in hooks/budget/budget_api.hpp).
  std::optional<double> ratio;
  /// lru, dtr, capuchin or hybrid; empty: the configuration's `policy` key.
  std::string policy;
  /// Prefetch offloaded tensors ahead of their next use, following the
  /// access sequence recorded in the previous step.
  bool prefetch = true;
};

/// For its lifetime, the runtime manages memory under a budget: it is the
/// allocator's reclaimer, and when an allocation would pass the budget it
/// evicts managed tensors (copies them to pinned host memory, or drops those
/// it can recompute) until it fits. On leaving, every managed tensor is made
/// resident again, management ends and the previous budget returns.
///
/// What a C++ program gets: the budget, the runtime, explicit offload() and
/// restore() of tensors (tensorpager_torch.hpp), step(), runtime_stats().
/// What needs Python: automatic management of the activations autograd saves
/// for backward (saved-tensor hooks are Python-only in PyTorch) and module
/// recompute (tp.budget()).
///
/// At most one scope is active per process; not copyable or movable.
/// Errors: tp::error when tensorpager is not installed or a scope is active;
/// tp::invalid_argument for a budget below memory in use, a ratio outside
/// (0, 1] or 0 bytes; tp::config_error for an unknown policy. Nothing changes
/// then. The destructor reports a failure to end cleanly on stderr.
class budget_scope {
 public:
  explicit budget_scope(std::optional<std::size_t> bytes);
  explicit budget_scope(const budget_options& opts);
  ~budget_scope();
  budget_scope(const budget_scope&) = delete;
  budget_scope& operator=(const budget_scope&) = delete;

 private:
  std::optional<std::size_t> previous_;
};

/// A step boundary: the runtime learns this step's access sequence and plans
/// the next from it; a ratio budget is resolved after the first. Does nothing
/// without an active budget_scope.
void step();

/// Whether a budget_scope (or Python's tp.budget()) is active.
bool budget_active();

/// The runtime's counters ("tensorpager.runtime.offloaded_bytes",
/// ".prefetched_bytes", ".recomputes", ".stall_ns", ".policy_ns", ...) of
/// the active scope, or of the last one; empty before the first.
std::map<std::string, std::int64_t> runtime_stats();

}  // namespace tensorpager
