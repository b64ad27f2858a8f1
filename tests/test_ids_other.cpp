// The second translation unit of test_ids: the same expressions are the same types (same ids,
// same registered records) in every translation unit, and their plans agree.
#include "ids_common.hpp"

#include <typeinfo>

namespace ids {

std::string deep_type_name_elsewhere() { return typeid(Deep).name(); }

kiln::any_tensor eval_deep_elsewhere(const kiln::any_tensor& x, const kiln::any_tensor& y) {
  return kiln::eval(deep(), {{"x", x}, {"y", y}}, kiln::eager::backend).any();
}

std::size_t deep_plan_nodes_elsewhere() { return kiln::plan<Deep>::schedule.g.nodes.size(); }

}  // namespace ids
