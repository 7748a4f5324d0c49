#include "hooks/process_state.hpp"

// The members' complete types, for process_state's constructor.
#include "core/clock.hpp"
#include "hooks/budget/budget_session.hpp"
#include "profiler/event_log.hpp"
#include "profiler/runtime_recorder.hpp"

namespace tp::hooks {

process_state& process() {
  static auto* state = new process_state;  // never destroyed: Note [Process state]
  return *state;
}

}  // namespace tp::hooks
