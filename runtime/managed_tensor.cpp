#include "runtime/managed_tensor.hpp"

#include <string>

#include "core/errors.hpp"

namespace tp {

void managed_tensor::move_to(tensor_state next) noexcept {
  if (!is_legal_transition(state_, next)) {
    fail_fast("tensorpager: runtime bug: tensor " + std::to_string(to_underlying(id)) + " cannot go from " +
              to_string(state_) + " to " + to_string(next) + " (Note [Tensor states] in runtime/managed_tensor.hpp)");
  }
  state_ = next;
}

}  // namespace tp
