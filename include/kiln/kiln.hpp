// kiln/kiln.hpp: the umbrella header.
#pragma once

#include "core/config.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/fixed_string.hpp"
#include "core/shape.hpp"
#include "core/shape_rules.hpp"
#include "core/tensor.hpp"
#include "graph/check.hpp"
#include "graph/expr.hpp"
#include "graph/graph.hpp"
#include "graph/ops.hpp"
#include "graph/trace.hpp"
#include "backend/eager.hpp"
#include "eval.hpp"
