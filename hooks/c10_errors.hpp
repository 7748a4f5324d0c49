#pragma once
// tensorpager's exceptions as c10's, for code that runs inside torch ops:
// tp::out_of_memory becomes c10::OutOfMemoryError, which Python sees as
// torch.OutOfMemoryError; bad arguments become c10::ValueError (ValueError);
// every other tp::error becomes c10::Error (RuntimeError). The message is
// tensorpager's, unchanged. Includes torch; see Note [fmt in torch-facing
// code] in hooks/CMakeLists.txt.

#include <c10/util/Exception.h>

#include "core/errors.hpp"

namespace tp::hooks {

/// Calls f() and rethrows what it throws as the matching c10 exception.
/// Exceptions that are not tensorpager's pass through unchanged.
template <class F>
decltype(auto) with_c10_errors(F&& f) {
  try {
    return f();
  } catch (const tp::out_of_memory& e) {
    C10_THROW_ERROR(OutOfMemoryError, e.what());
  } catch (const tp::invalid_argument& e) {
    C10_THROW_ERROR(ValueError, e.what());
  } catch (const tp::config_error& e) {
    C10_THROW_ERROR(ValueError, e.what());
  } catch (const tp::error& e) {
    C10_THROW_ERROR(Error, e.what());
  }
}

}  // namespace tp::hooks
