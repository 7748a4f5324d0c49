#pragma once
// Literal operation lists for the caching allocator's fuzz harness: what one
// fuzz worker did, written as C++ rows (write_fuzz_ops), and run again in
// order against a fresh allocator with the same checks (run_fuzz_ops). Note
// [Fuzz regressions are literal lists] in caching_allocator_fuzz_test.cpp.

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "caching_allocator_fuzz_harness.hpp"

namespace tp::testing {

/// One step of a worker. A row reads {kind, block, arg, stream}. Blocks are
/// named by the number their alloc gives them, so a list keeps its meaning
/// when rows are taken out of it.
struct fuzz_op {
  enum kind_t : std::uint8_t {
    alloc,        ///< allocate `arg` bytes on stream `stream`, as block `block`
    free,         ///< free block `block`
    use,          ///< copy block `block`'s head on stream `stream` + record_stream
    empty_cache,  ///< empty_cache()
    set_budget,   ///< set_budget(`arg` bytes; 0: none)
    check,        ///< check the oldest pending copy (`arg` 1: wait for it, 0: only if done)
  };
  kind_t kind;
  std::uint64_t block = 0;
  std::uint64_t arg = 0;
  int stream = 0;  ///< an index into fuzz_harness's streams
};

inline const char* to_string(fuzz_op::kind_t k) {
  switch (k) {
    case fuzz_op::alloc: return "alloc";
    case fuzz_op::free: return "free";
    case fuzz_op::use: return "use";
    case fuzz_op::empty_cache: return "empty_cache";
    case fuzz_op::set_budget: return "set_budget";
    case fuzz_op::check: return "check";
  }
  return "?";
}

/// Writes `ops` as rows of a C++ initializer list, one per line, under a
/// comment saying where they came from. Returns false if the file cannot be
/// written.
inline bool write_fuzz_ops(const std::string& path, const std::vector<fuzz_op>& ops, const std::string& origin) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  std::fprintf(f, "// %zu operations: %s.\n// {kind, block, arg, stream}: struct fuzz_op.\n", ops.size(),
               origin.c_str());
  for (const fuzz_op& op : ops) {
    std::fprintf(f, "{fuzz_op::%s, %llu, %llu, %d},\n", to_string(op.kind), static_cast<unsigned long long>(op.block),
                 static_cast<unsigned long long>(op.arg), op.stream);
  }
  return std::fclose(f) == 0;
}

/// Reads what write_fuzz_ops wrote (comment lines skipped); nullopt when a
/// row does not parse.
inline std::optional<std::vector<fuzz_op>> read_fuzz_ops(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return std::nullopt;
  std::vector<fuzz_op> ops;
  char line[256];
  bool ok = true;
  while (ok && std::fgets(line, sizeof line, f) != nullptr) {
    if (line[0] == '/' || line[0] == '\n') continue;
    char name[32];
    unsigned long long block = 0, arg = 0;
    int stream = 0;
    ok = std::sscanf(line, " {fuzz_op::%31[a-z_], %llu, %llu, %d}", name, &block, &arg, &stream) == 4;
    std::optional<fuzz_op::kind_t> kind;
    for (int k = fuzz_op::alloc; ok && k <= fuzz_op::check; ++k) {
      if (std::string(name) == to_string(static_cast<fuzz_op::kind_t>(k))) kind = static_cast<fuzz_op::kind_t>(k);
    }
    ok = ok && kind.has_value();
    if (ok) ops.push_back({*kind, block, arg, stream});
  }
  std::fclose(f);
  if (!ok) return std::nullopt;
  return ops;
}

/// Runs `ops` in order on `h`, as one fuzz worker with invariants checked
/// after every step, then frees what is left, waits for every copy and
/// finishes (fuzz_harness::finish). An op that names a block that is not
/// live (its allocation failed here, was taken out, or it was freed) does
/// nothing. Not
/// thread-safe; h must be fresh.
inline void run_fuzz_ops(fuzz_harness& h, const std::vector<fuzz_op>& ops) {
  std::map<std::uint64_t, std::pair<void*, live_block>> live;  // by block number
  std::vector<pending_check> checks;
  for (const fuzz_op& op : ops) {
    const auto it = live.find(op.block);
    switch (op.kind) {
      case fuzz_op::alloc: {
        live_block b{};
        // A number already live is the list's mistake: the new block is not kept.
        void* p = h.allocate(op.arg, op.stream, b);
        if (p != nullptr && !live.emplace(op.block, std::pair{p, b}).second) {
          ADD_FAILURE() << "block " << op.block << " allocated twice";
          h.release(p, b);
        }
        break;
      }
      case fuzz_op::free:
        if (it != live.end()) {
          h.release(it->second.first, it->second.second);
          live.erase(it);
        }
        break;
      case fuzz_op::use:
        if (it != live.end()) h.use(it->second.first, it->second.second, op.stream, checks);
        break;
      case fuzz_op::empty_cache:
        h.empty_cache();
        break;
      case fuzz_op::set_budget:
        h.set_budget(op.arg == 0 ? std::nullopt : std::optional<std::size_t>(op.arg));
        break;
      case fuzz_op::check:
        if (!checks.empty()) {
          h.finish_check(checks.front(), op.arg != 0);
          if (checks.front().copy == nullptr) checks.erase(checks.begin());
        }
        break;
    }
    h.after_step(checks);
    h.counts.ops++;
    h.check_invariants();
  }
  for (auto& [k, block] : live) h.release(block.first, block.second);
  for (auto& c : checks) h.finish_check(c, /*wait=*/true);
  h.finish();
}

}  // namespace tp::testing
