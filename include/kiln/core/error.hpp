// kiln/core/error.hpp: run-time errors. Every message names the op and the shapes involved.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "config.hpp"
#include "dtype.hpp"
#include "shape.hpp"

namespace kiln {

/// Thrown when run-time shapes do not fit an op: "kiln: add: shapes [3, 4] and [5] ...".
class shape_error : public std::invalid_argument {
 public:
  KILN_RUNTIME shape_error(std::string_view op, const dims& a, const dims& b, std::string_view what);
  /// For errors about one shape (an axis out of range, a non-contiguous reshape).
  KILN_RUNTIME shape_error(std::string_view op, const dims& a, std::string_view what);
  const std::string& op() const noexcept { return op_; }
  const dims& lhs() const noexcept { return a_; }
  const dims& rhs() const noexcept { return b_; }

 private:
  std::string op_;
  dims a_, b_;
};

/// Thrown when a run-time dtype does not fit (a bound input of the wrong element type).
class dtype_error : public std::invalid_argument {
 public:
  KILN_RUNTIME dtype_error(std::string_view op, dtype expected, dtype got);
};

#if KILN_DEFINE_RUNTIME
KILN_RUNTIME shape_error::shape_error(std::string_view op, const dims& a, const dims& b, std::string_view what)
    : std::invalid_argument("kiln: " + std::string(op) + ": shapes " + to_string(a) + " and " + to_string(b) + " " +
                            std::string(what)),
      op_(op), a_(a), b_(b) {}
KILN_RUNTIME shape_error::shape_error(std::string_view op, const dims& a, std::string_view what)
    : std::invalid_argument("kiln: " + std::string(op) + ": shape " + to_string(a) + " " + std::string(what)),
      op_(op), a_(a), b_(a) {}
KILN_RUNTIME dtype_error::dtype_error(std::string_view op, dtype expected, dtype got)
    : std::invalid_argument("kiln: " + std::string(op) + ": expected dtype " + std::string(name(expected)) + ", got " +
                            std::string(name(got))) {}
#endif  // KILN_DEFINE_RUNTIME

}  // namespace kiln
