#include "device/event_pool.hpp"

namespace tp {

event_pool::~event_pool() {
  for (const event_id e : all_) dev_.destroy_event(e);
}

event_id event_pool::take() {
  if (!free_.empty()) {
    const event_id e = free_.back();
    free_.pop_back();
    return e;
  }
  const event_id e = timing_ ? dev_.create_timing_event() : dev_.create_event();
  all_.push_back(e);
  return e;
}

}  // namespace tp
