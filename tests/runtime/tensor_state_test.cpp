// Note [Tensor states]: the legal moves pass, any other ends the process.

#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "runtime/managed_tensor.hpp"

namespace tp {
namespace {

constexpr tensor_state all_states[] = {tensor_state::resident, tensor_state::offloading, tensor_state::on_host,
                                       tensor_state::prefetching, tensor_state::dropped};

// Brings a new (resident) tensor to `s` along legal moves.
void reach(managed_tensor& t, tensor_state s) {
  switch (s) {
    case tensor_state::resident: return;
    case tensor_state::offloading: t.move_to(tensor_state::offloading); return;
    case tensor_state::on_host:
      reach(t, tensor_state::offloading);
      t.move_to(tensor_state::on_host);
      return;
    case tensor_state::prefetching:
      reach(t, tensor_state::on_host);
      t.move_to(tensor_state::prefetching);
      return;
    case tensor_state::dropped: t.move_to(tensor_state::dropped); return;
  }
}

// The diagram of the Note, written out again by hand.
const std::set<std::pair<tensor_state, tensor_state>> the_notes_edges = {
    {tensor_state::resident, tensor_state::offloading},  {tensor_state::offloading, tensor_state::on_host},
    {tensor_state::offloading, tensor_state::resident},  {tensor_state::on_host, tensor_state::prefetching},
    {tensor_state::prefetching, tensor_state::resident}, {tensor_state::prefetching, tensor_state::on_host},
    {tensor_state::resident, tensor_state::dropped},     {tensor_state::dropped, tensor_state::resident},
};

TEST(TensorState, ANewTensorIsResident) {
  managed_tensor t;
  EXPECT_EQ(t.state(), tensor_state::resident);
}

TEST(TensorState, TheTableIsTheNotesDiagram) {
  for (const tensor_state from : all_states) {
    for (const tensor_state to : all_states) {
      EXPECT_EQ(is_legal_transition(from, to), the_notes_edges.contains({from, to}))
          << to_string(from) << " -> " << to_string(to);
    }
  }
}

TEST(TensorState, EveryLegalMoveIsMade) {
  for (const auto& [from, to] : the_notes_edges) {
    managed_tensor t;
    reach(t, from);
    ASSERT_EQ(t.state(), from);
    t.move_to(to);
    EXPECT_EQ(t.state(), to) << to_string(from) << " -> " << to_string(to);
  }
}

TEST(TensorStateDeathTest, AnyOtherMoveEndsTheProcess) {
  for (const tensor_state from : all_states) {
    for (const tensor_state to : all_states) {
      if (the_notes_edges.contains({from, to})) continue;
      managed_tensor t;
      t.id = tensor_id{7};
      reach(t, from);
      EXPECT_DEATH(t.move_to(to), std::string("tensor 7 cannot go from ") + to_string(from) + " to " + to_string(to))
          << to_string(from) << " -> " << to_string(to);
    }
  }
}

}  // namespace
}  // namespace tp
