#pragma once
// The exception hierarchy every layer throws across its public boundary.
//
// tp::error is the root; callers that only want "tensorpager failed" catch it.
// tp::out_of_memory also derives from std::bad_alloc so that code written for
// any allocator treats it as an allocation failure. The torch layer maps it to
// c10::OutOfMemoryError (Python: torch.OutOfMemoryError).

#include <cstdio>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

namespace tp {

/// Root of all tensorpager errors. Thread-safe to throw and copy.
class error : public std::runtime_error {
 public:
  explicit error(const std::string& what) : std::runtime_error(what) {}
};

/// A caller passed something the API does not accept (unknown stream, pointer
/// not owned by this allocator, budget below what is in use). Nothing was
/// changed by the call that threw it.
class invalid_argument : public error {
 public:
  explicit invalid_argument(const std::string& what) : error(what) {}
};

/// A configuration string or value was malformed or impossible. The message
/// names the input and lists what is accepted.
class config_error : public error {
 public:
  explicit config_error(const std::string& what) : error(what) {}
};

/// The CUDA runtime or driver reported a failure (or is absent).
class cuda_error : public error {
 public:
  explicit cuda_error(const std::string& what) : error(what) {}
};

/// An allocation could not be satisfied after reclaim and one retry. The
/// message carries the figures needed to act on it.
class out_of_memory : public std::bad_alloc {
 public:
  explicit out_of_memory(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

/// Ends the process with message on stderr. For a broken contract found
/// where nothing can be thrown: a double free or a foreign pointer reaching a
/// noexcept deallocate, which glibc's free() and tcmalloc also end the
/// process for. Carrying on would free memory in use or corrupt the cache.
[[noreturn]] inline void fail_fast(const std::string& message) noexcept {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace tp
