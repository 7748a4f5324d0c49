// Note [Evicted neighbourhood]: DTR's equivalence classes of evicted tensors.

#include "runtime/lineage.hpp"

#include <gtest/gtest.h>

namespace tp {
namespace {

tensor_id id(std::uint64_t n) { return tensor_id{n}; }

// a -> b -> c -> d, each costing 10 * its id.
lineage chain() {
  lineage g;
  g.add(id(1), 10, {});
  for (std::uint64_t n = 2; n <= 4; ++n) {
    const tensor_id parent[] = {id(n - 1)};
    g.add(id(n), static_cast<std::int64_t>(10 * n), parent);
  }
  return g;
}

TEST(Lineage, EvictedNeighboursFormOneClassPricedOnce) {
  lineage g = chain();
  EXPECT_EQ(g.neighbourhood_cost(id(2)), 0);
  g.evicted(id(1));
  g.evicted(id(3));
  // 2's neighbours 1 and 3 are evicted, in two classes.
  EXPECT_EQ(g.neighbourhood_cost(id(2)), 10 + 30);
  g.evicted(id(2));  // joins both: one class worth 60
  EXPECT_EQ(g.neighbourhood_cost(id(4)), 60);
}

TEST(Lineage, ARecomputedTensorLeavesItsClassAndAGhostStaysEvictedUntilPruned) {
  lineage g = chain();
  g.evicted(id(2));
  g.evicted(id(3));
  EXPECT_EQ(g.neighbourhood_cost(id(4)), 50);
  g.restored(id(2));  // the class is not split: it is worth 30 now
  EXPECT_EQ(g.neighbourhood_cost(id(4)), 30);
  g.untracked(id(1));  // its last reference went: evicted, as DTR does
  EXPECT_EQ(g.neighbourhood_cost(id(2)), 10 + 30);
  EXPECT_EQ(g.size(), 4u);
  g.prune();
  EXPECT_EQ(g.size(), 3u);
  EXPECT_FALSE(g.knows(id(1)));
  EXPECT_EQ(g.neighbourhood_cost(id(2)), 30);  // 3 is still evicted, 1 is gone
}

TEST(Lineage, ARevivedGhostTakesItsPlaceBackWithItsEdges) {
  lineage g = chain();
  g.untracked(id(2));
  EXPECT_EQ(g.neighbourhood_cost(id(3)), 20);
  g.add(id(9), 20, {}, id(2));  // re-created under a new id
  EXPECT_FALSE(g.knows(id(2)));
  EXPECT_EQ(g.neighbourhood_cost(id(3)), 0);
  g.evicted(id(9));
  EXPECT_EQ(g.neighbourhood_cost(id(3)), 20);
  EXPECT_EQ(g.neighbourhood_cost(id(1)), 20);
}

}  // namespace
}  // namespace tp
