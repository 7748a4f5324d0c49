#pragma once
// tensorpager's configuration: one grammar for PYTORCH_CUDA_ALLOC_CONF,
// TENSORPAGER_CONF and explicit strings.
//
// Note [Configuration grammar]
//   text  := "" | entry { "," entry } [ "," ]
//   entry := key ":" value
// Blanks around keys and values are trimmed. The empty string (or blanks)
// means every default. One trailing comma is tolerated; an empty entry
// anywhere else is an error. Keys are lower case and case-sensitive; the
// values of choice keys (policy:LRU) and size units are case-insensitive. A
// value runs from the first ':' to the next ',', so a value may contain ':'
// (timeline:C:/runs/a.json) or '=' and ';' (compress:Conv2d=pool2;ReLU=bf16)
// but never ','. Each key may be given once. Sizes
// follow Note [Size grammar] in parse_bytes.hpp. Keys that can be unlimited
// (budget, host_budget, max_split_size) also accept "none", their default.
//
// The budget key's values: Note [Budget spellings] in memory_budget.hpp. A
// ratio of the first step's peak (budget:0.5) needs manage:activations,
// which measures that step; without it the key caps the allocator from the
// start, and takes a size or a share of the device (budget:0.9device).
//
// Note [Sharing PYTORCH_CUDA_ALLOC_CONF]
// PyTorch rejects keys it does not know, so the start-up hook splits the
// variable with split_alloc_conf(), parses our part and hands PyTorch the
// rest. PyTorch's own "backend" key (native, cudaMallocAsync) is shared:
// backend:tensorpager goes to us only, any other backend goes to both, so
// PyTorch still selects its own allocator and we know to stay out of the way.
// expandable_segments is PyTorch's key and ours: it goes to both (PyTorch's
// allocator ignores it while tensorpager's serves the process).

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/memory_budget.hpp"
#include "runtime/policy_kind.hpp"

namespace tp {

/// Which allocator serves the process. Anything but tensorpager leaves
/// PyTorch's own allocator in charge (Note [Sharing PYTORCH_CUDA_ALLOC_CONF]).
enum class backend_kind { tensorpager, native, cuda_malloc_async };

// policy_kind (lru, dtr, capuchin, hybrid) is the runtime's own type.

/// What happens when the pinned host pool is full: throw, or hand out
/// pageable memory (copies from it are synchronous on CUDA). The allocator's
/// pinned_host_pool has its own enum; hooks/ maps this one onto it.
enum class host_fallback_mode { error, pageable };

/// What the runtime manages process-wide once torch is imported: nothing
/// (tensorpager only allocates; training below the budget needs tp.budget),
/// or every activation autograd saves, as if the whole process ran inside
/// tp.budget (Note [Managed process] in python/tensorpager/_managed.py).
/// The C++ library only carries the value; the Python package acts on it.
enum class manage_kind { none, activations, all };

/// Which adapter the hooks install: the c10 CUDA allocator, or the CPU
/// allocator over a simulated device (tests, CI without a GPU).
enum class device_kind { cuda, cpu };

/// Every setting, with its default. A plain value: copy it, compare it,
/// build it in a test. See config_keys() for what each field means.
struct config {
  backend_kind backend = backend_kind::tensorpager;
  std::optional<memory_budget> budget;          ///< none: no cap
  std::optional<std::size_t> host_budget;       ///< none: no cap beyond what the OS allows
  host_fallback_mode host_fallback = host_fallback_mode::error;
  std::optional<std::size_t> max_split_size;    ///< none: unlimited; else >= min_max_split_size
  /// Note [Expandable segments] in allocator/caching_allocator.hpp; the
  /// default and why: Note [Expandable segments by default] in config.cpp.
  bool expandable_segments = true;
  manage_kind manage = manage_kind::none;
  policy_kind policy = default_policy;
  std::string timeline;                         ///< empty: no timeline file
  std::size_t timeline_events = std::size_t{1} << 20;  ///< the timeline's cap on events, > 0
  std::string record_trace;                     ///< empty: no trace file
  device_kind device = device_kind::cuda;
  std::size_t sim_capacity = std::size_t{64} << 30;  ///< 64 GiB
  /// Note [Compress key grammar], trimmed; empty: off (the key's "none").
  std::string compress;

  friend bool operator==(const config&, const config&) = default;
};

/// The smallest max_split_size accepted, as PyTorch's max_split_size_mb (its
/// large-block threshold, 20 MiB).
inline constexpr std::size_t min_max_split_size = std::size_t{20} << 20;

/// Whether a budget block lends the runtime the parameters, gradients and
/// optimizer state a backward no longer needs (Note [Lending parameters and
/// gradients] in _lend.py). tp.budget()'s lend default reads it from the
/// extension (_C.BUDGET_LENDS_BY_DEFAULT, hooks/python_module.cpp), and so
/// does the simulator's (Note [The simulator's defaults] in
/// sim/simulator.hpp). manage:all lends as it does; manage:activations lends
/// nothing. No key carries it.
inline constexpr bool budget_lends_by_default = true;

/// One row of the key table: the single source for parsing, error messages
/// and the README. All views point at static storage.
struct config_key_info {
  std::string_view name;           ///< "budget"
  std::string_view kind;           ///< "size or ratio", "choice", "path", "size"
  std::string_view accepted;       ///< what values are accepted, in words
  std::string_view default_value;  ///< as to_string would write it; "none" or ""
  std::string_view description;    ///< one sentence
};

/// Every key parse_config accepts, in documentation order. Static storage,
/// thread-safe.
std::span<const config_key_info> config_keys() noexcept;

/// The row for name, or nullptr. Thread-safe.
const config_key_info* find_config_key(std::string_view name) noexcept;

/// Parses text by Note [Configuration grammar]. source names where the text
/// came from ("PYTORCH_CUDA_ALLOC_CONF", "TENSORPAGER_CONF", "tp.budget()")
/// and starts every error message. Throws tp::config_error naming the source,
/// the offending "key:value" entry, what is wrong and what is accepted. Pure,
/// thread-safe.
config parse_config(std::string_view text, std::string_view source);

/// The non-default settings of c as text that parse_config reads back to an
/// equal config ("" for the defaults). Throws tp::config_error when a path
/// holds ',' or leading/trailing blanks, which the grammar cannot carry, or a
/// field is out of range (a budget of 0 bytes, a ratio outside (0, 1]).
std::string to_string(const config& c);

/// The two halves of a PYTORCH_CUDA_ALLOC_CONF value.
struct split_conf {
  std::string ours;    ///< entries whose key is in config_keys(), in order
  std::string theirs;  ///< everything else (PyTorch's keys), in order
};

/// Splits a PYTORCH_CUDA_ALLOC_CONF value (Note [Sharing
/// PYTORCH_CUDA_ALLOC_CONF]). Entries are separated by commas outside square
/// brackets, so "roundup_power2_divisions:[256:1,512:2,>:1]" stays one entry.
/// Entries are trimmed and re-joined with ","; empty entries are dropped.
/// Validates nothing (parse_config and PyTorch do) and never throws except
/// std::bad_alloc. Pure, thread-safe.
split_conf split_alloc_conf(std::string_view conf);

/// A Markdown table of config_keys() for the README. Pure.
std::string config_keys_markdown();

/// Names as the grammar writes them ("hybrid", "cudaMallocAsync"). Pure.
std::string_view to_string(backend_kind v) noexcept;
std::string_view to_string(host_fallback_mode v) noexcept;
std::string_view to_string(device_kind v) noexcept;
std::string_view to_string(manage_kind v) noexcept;

}  // namespace tp
