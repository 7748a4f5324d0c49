#include "config/config.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in format.h before fmt 11)

#include "core/errors.hpp"
#include "config/compress_spec.hpp"
#include "config/parse_bytes.hpp"
#include "config/text.hpp"

// Reading configuration text: the key table and the choices' names,
// parse_config and split_alloc_conf (Note [Configuration grammar] in
// config.hpp). Writing it back out is format_config.cpp; resolving a budget is
// memory_budget.cpp. key_table stays in this file: tests/python/test_keys.py
// and python/tensorpager/_keys.py find it here.

namespace tp {
namespace {

using config_text::iequals;
using config_text::is_blank;
using config_text::split_entries;
using config_text::trim;

// Note [Expandable segments by default]
// expandable_segments defaults to True, where PyTorch's default is False,
// because tensorpager exists to run under a budget, and what fits under one
// is decided by fragmentation: expandable segments strand less at the peak,
// so the same work fits a smaller budget, and the cached fast path is no
// slower (measured on the CPU: docs/decisions.md, Note [Expandable segments
// by default]; bench/results/expandable_segments.md). What it costs on a GPU
// is not measured yet: each map is cuMemCreate + cuMemMap + cuMemSetAccess
// per 2 MiB granule, and an unmap waits for the segment's stream first (Note
// [Giving memory back waits] in allocator/caching_allocator.hpp); unmapping
// happens only under pressure and in empty_cache().
// PyTorch's reasons for its default (IPC handles, older CUDA graph support)
// concern features tensorpager does not offer.

// The key table (config.hpp, config_keys()). Parsing dispatches on these
// names; a test checks every row parses its own default.
constexpr std::array<config_key_info, 14> key_table = {{
    {"backend", "choice", "tensorpager, native, cudaMallocAsync", "tensorpager",
     "Which allocator serves the process; native and cudaMallocAsync leave PyTorch's own in "
     "charge."},
    {"budget", "size or ratio",
     "a size > 0, a ratio in (0, 1] with a decimal point: of the first step's peak (0.5, needs "
     "manage:activations) or of the device's memory (0.9device), or none",
     "none", "Cap on device memory reserved by tensorpager; beyond it the cache is freed, the runtime evicts "
     "under manage:activations, and an allocation that still does not fit raises out-of-memory."},
    {"manage", "choice", "activations, all, none", "none",
     "activations: once torch is imported, every tensor autograd saves is managed under the "
     "budget (swapped or recomputed), with no code change; all: also the parameters, gradients and "
     "optimizer state a backward no longer needs, swapped out until it ends, as inside tp.budget."},
    {"host_budget", "size", "a size > 0, or none", "none",
     "Cap on the pinned host pool that holds swapped-out tensors; none means what the OS allows."},
    {"host_fallback", "choice", "error, pageable", "error",
     "When the pinned host pool is full: raise an error, or use pageable memory (slower "
     "copies)."},
    {"max_split_size", "size", "a size >= 20MiB, or none", "none",
     "Cached blocks larger than this are never split (as PyTorch's max_split_size_mb)."},
    {"expandable_segments", "choice", "True, False", "True",
     "Grow segments by mapping granules of reserved address space (PyTorch's key), so that free "
     "memory can be unmapped and mapped where it is needed; the budget caps mapped bytes."},
    // The default is tp::default_policy (a static_assert below checks it).
    {"policy", "choice", "lru, dtr, capuchin, hybrid", "hybrid",
     "Eviction policy: LRU, DTR's score, Capuchin's swap-or-recompute, or hybrid (the default: it plans "
     "swaps and recomputes from the step before, and beats DTR's own simulator on DTR's logs: "
     "bench/results/sim_dtr.md)."},
    {"timeline", "path", "a file path without ',' (empty: off)", "",
     "Record memory events and write them to this file at exit; its extension chooses the "
     "format: .json Perfetto, .pickle memory_viz, .html page, .txt report."},
    {"timeline_events", "count", "a whole number > 0", "1048576",
     "Cap on the events a timeline keeps (80 bytes each); later ones are counted as dropped."},
    {"record_trace", "path", "a file path without ',' (empty: off)", "",
     "Record an operator trace to this file for replay on the simulator."},
    {"device", "choice", "cuda, cpu", "cuda",
     "Which adapter is installed: the CUDA allocator, or the CPU allocator over a simulated "
     "device."},
    {"sim_capacity", "size", "a size > 0", "64GiB",
     "Memory of the simulated device behind the cpu adapter."},
    {"compress", "spec",
     "none, pool2, bf16, fp8, or rules Selector=method joined by ';' (Conv2d=pool2;ReLU=bf16), "
     "where Selector is a module class name or * and method one of pool2, bf16, fp8, none",
     "none",
     "Store the saved activations of the selected module classes compressed for backward, "
     "process-wide once torch is imported (gradients become approximate)."},
}};

template <typename E>
struct choice {
  std::string_view name;
  E value;
};

constexpr std::array<choice<backend_kind>, 3> backend_choices = {{
    {"tensorpager", backend_kind::tensorpager},
    {"native", backend_kind::native},
    {"cudaMallocAsync", backend_kind::cuda_malloc_async},
}};
constexpr std::array<choice<policy_kind>, 4> policy_choices = {{
    {"lru", policy_kind::lru},
    {"dtr", policy_kind::dtr},
    {"capuchin", policy_kind::capuchin},
    {"hybrid", policy_kind::hybrid},
}};
constexpr std::array<choice<host_fallback_mode>, 2> fallback_choices = {{
    {"error", host_fallback_mode::error},
    {"pageable", host_fallback_mode::pageable},
}};
constexpr std::array<choice<bool>, 2> bool_choices = {{
    {"True", true},
    {"False", false},
}};
constexpr std::array<choice<manage_kind>, 3> manage_choices = {{
    {"none", manage_kind::none},
    {"activations", manage_kind::activations},
    {"all", manage_kind::all},
}};
constexpr std::array<choice<device_kind>, 2> device_choices = {{
    {"cuda", device_kind::cuda},
    {"cpu", device_kind::cpu},
}};

template <typename E, std::size_t N>
std::string_view name_of(const std::array<choice<E>, N>& choices, E v) {
  for (const auto& c : choices) {
    if (c.value == v) return c.name;
  }
  return "?";
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0u : 1u)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string all_key_names() {
  std::string out;
  for (const auto& k : key_table) {
    if (!out.empty()) out += ", ";
    out += k.name;
  }
  return out;
}

/// One entry being parsed, with what error messages need.
struct entry_context {
  std::string_view source;
  std::string_view entry;  // "key:value" as written, trimmed
  const config_key_info* key;
  std::string_view value;

  [[noreturn]] void fail(std::string_view problem) const {
    std::string accepted(key->accepted);
    if (key->kind.find("size") != std::string_view::npos) {
      accepted += fmt::format("; sizes are {}", accepted_size_forms);
    }
    throw config_error(fmt::format("{}: in '{}': {}. {} accepts {}", source, entry, problem,
                                   key->name, accepted));
  }
};

template <typename E, std::size_t N>
E parse_choice(const entry_context& ctx, const std::array<choice<E>, N>& choices) {
  for (const auto& c : choices) {
    if (iequals(ctx.value, c.name)) return c.value;
  }
  ctx.fail(ctx.value.empty() ? std::string("the value is empty")
                             : fmt::format("'{}' is not one of the choices", ctx.value));
}

std::size_t parse_size_value(const entry_context& ctx, std::size_t minimum) {
  const bytes_parse_result r = parse_bytes(ctx.value);
  if (r.error == bytes_error::unknown_unit) {
    ctx.fail(fmt::format("unknown unit '{}' in size '{}'", r.unit, ctx.value));
  }
  if (r.error == bytes_error::fraction_without_unit) {
    ctx.fail(fmt::format("'{}' is not a whole number of bytes and {} takes no ratio; add a unit "
                         "(e.g. {}GiB)",
                         ctx.value, ctx.key->name, ctx.value));
  }
  if (r.error != bytes_error::none) ctx.fail(fmt::format("{}: '{}'", describe(r.error), ctx.value));
  if (r.bytes < minimum) {
    ctx.fail(fmt::format("'{}' is {} bytes, below the minimum of {}", ctx.value, r.bytes,
                         format_size_exact(minimum)));
  }
  return r.bytes;
}

std::optional<std::size_t> parse_optional_size(const entry_context& ctx, std::size_t minimum) {
  if (iequals(ctx.value, "none")) return std::nullopt;
  return parse_size_value(ctx, minimum);
}

std::optional<memory_budget> parse_budget_value(const entry_context& ctx) {
  budget_parse_result r = parse_budget(ctx.value);  // Note [Budget spellings]
  if (!r.ok()) ctx.fail(r.problem);
  return std::move(r.budget);
}

// A ratio of the first step's peak needs a step measured with no budget: only
// manage:activations runs one (Note [Budget spellings]). The problem, or "".
std::string budget_needs_problem(const config& c) {
  const std::optional<double> peak = c.budget ? c.budget->ratio_of(budget_share::peak) : std::nullopt;
  if (!peak || c.manage != manage_kind::none) return {};
  return fmt::format(
      "a ratio of the first step's peak needs manage:activations, which measures that step; without it "
      "the budget caps the allocator from the start: write {}device for that share of the device's "
      "memory, or a size",
      format_ratio_exact(*peak));
}

std::string parse_path(const entry_context& ctx) { return std::string(ctx.value); }

std::size_t parse_count(const entry_context& ctx) {
  const std::string_view v = ctx.value;
  if (v.empty()) ctx.fail("the value is empty");
  std::size_t n = 0;
  for (const char ch : v) {
    if (ch < '0' || ch > '9') ctx.fail(fmt::format("'{}' is not a whole number", v));
    if (n > (SIZE_MAX - 9) / 10) ctx.fail(fmt::format("'{}' is too large", v));
    n = n * 10 + static_cast<std::size_t>(ch - '0');
  }
  if (n == 0) ctx.fail("0 would keep no events; leave timeline unset to record nothing");
  return n;
}

std::string parse_compress(const entry_context& ctx) {
  const std::string problem = compress_spec_problem(ctx.value);
  if (!problem.empty()) ctx.fail(problem);
  return normalize_compress_spec(ctx.value);
}

void apply(config& c, const entry_context& ctx) {
  const std::string_view k = ctx.key->name;
  if (k == "backend") {
    c.backend = parse_choice(ctx, backend_choices);
  } else if (k == "budget") {
    c.budget = parse_budget_value(ctx);
  } else if (k == "manage") {
    c.manage = parse_choice(ctx, manage_choices);
  } else if (k == "host_budget") {
    c.host_budget = parse_optional_size(ctx, 1);
  } else if (k == "host_fallback") {
    c.host_fallback = parse_choice(ctx, fallback_choices);
  } else if (k == "max_split_size") {
    c.max_split_size = parse_optional_size(ctx, min_max_split_size);
  } else if (k == "expandable_segments") {
    c.expandable_segments = parse_choice(ctx, bool_choices);
  } else if (k == "policy") {
    c.policy = parse_choice(ctx, policy_choices);
  } else if (k == "timeline") {
    c.timeline = parse_path(ctx);
  } else if (k == "timeline_events") {
    c.timeline_events = parse_count(ctx);
  } else if (k == "compress") {
    c.compress = parse_compress(ctx);
  } else if (k == "record_trace") {
    c.record_trace = parse_path(ctx);
  } else if (k == "device") {
    c.device = parse_choice(ctx, device_choices);
  } else if (k == "sim_capacity") {
    c.sim_capacity = parse_size_value(ctx, 1);
  }
}

[[noreturn]] void fail_entry(std::string_view source, std::string_view entry,
                             std::string_view problem) {
  throw config_error(fmt::format("{}: in '{}': {}. Entries are key:value separated by ','; "
                                 "accepted keys: {}",
                                 source, entry, problem, all_key_names()));
}

}  // namespace

// The policy row's default is written out (python/tensorpager/_keys.py's
// test reads the table as text); it must name tp::default_policy.
static_assert(std::string_view("hybrid") == to_string(default_policy));

std::span<const config_key_info> config_keys() noexcept { return key_table; }

const config_key_info* find_config_key(std::string_view name) noexcept {
  for (const auto& k : key_table) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

config parse_config(std::string_view text, std::string_view source) {
  config c;
  if (trim(text).empty()) return c;
  std::vector<std::string_view> entries = split_entries(text, /*bracket_aware=*/false);
  if (entries.size() > 1 && trim(entries.back()).empty()) entries.pop_back();  // trailing comma

  std::array<std::string_view, key_table.size()> seen{};
  std::array<bool, key_table.size()> was_seen{};
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const std::string_view entry = trim(entries[i]);
    if (entry.empty()) {
      fail_entry(source, text, fmt::format("entry {} is empty (only one trailing ',' is allowed)",
                                           i + 1));
    }
    const std::size_t colon = entry.find(':');
    if (colon == std::string_view::npos) {
      fail_entry(source, entry, "missing ':' between key and value");
    }
    const std::string_view name = trim(entry.substr(0, colon));
    if (name.empty()) fail_entry(source, entry, "the key before ':' is empty");
    const config_key_info* key = find_config_key(name);
    if (key == nullptr) {
      std::string problem = fmt::format("unknown key '{}'", name);
      for (const auto& k : key_table) {
        if (edit_distance(name, k.name) <= 2) problem += fmt::format(" (did you mean '{}'?)", k.name);
      }
      fail_entry(source, entry, problem);
    }
    const auto index = static_cast<std::size_t>(key - key_table.data());
    if (was_seen[index]) {
      throw config_error(fmt::format("{}: in '{}': key '{}' is given twice (first as '{}'); give "
                                     "each key once",
                                     source, entry, name, seen[index]));
    }
    was_seen[index] = true;
    seen[index] = entry;
    apply(c, entry_context{source, entry, key, trim(entry.substr(colon + 1))});
  }
  if (const std::string problem = budget_needs_problem(c); !problem.empty()) {
    const config_key_info* budget = find_config_key("budget");
    entry_context{source, seen[static_cast<std::size_t>(budget - key_table.data())], budget, {}}.fail(problem);
  }
  return c;
}

split_conf split_alloc_conf(std::string_view conf) {
  std::vector<std::string_view> ours;
  std::vector<std::string_view> theirs;
  for (const std::string_view raw : split_entries(conf, /*bracket_aware=*/true)) {
    const std::string_view entry = trim(raw);
    if (entry.empty()) continue;
    const std::size_t colon = entry.find(':');
    const std::string_view name = trim(entry.substr(0, colon));
    if (name == "backend") {
      const std::string_view value =
          colon == std::string_view::npos ? std::string_view{} : trim(entry.substr(colon + 1));
      ours.push_back(entry);
      if (!iequals(value, "tensorpager")) theirs.push_back(entry);
    } else if (name == "expandable_segments") {  // PyTorch's key too: both keep it
      ours.push_back(entry);
      theirs.push_back(entry);
    } else if (find_config_key(name) != nullptr) {
      ours.push_back(entry);
    } else {
      theirs.push_back(entry);
    }
  }
  return {fmt::format("{}", fmt::join(ours, ",")), fmt::format("{}", fmt::join(theirs, ","))};
}

std::string_view to_string(backend_kind v) noexcept { return name_of(backend_choices, v); }
std::string_view to_string(host_fallback_mode v) noexcept { return name_of(fallback_choices, v); }
std::string_view to_string(device_kind v) noexcept { return name_of(device_choices, v); }
std::string_view to_string(manage_kind v) noexcept { return name_of(manage_choices, v); }

}  // namespace tp
