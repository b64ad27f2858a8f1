// kiln/graph/check.hpp: compile-time errors a person can read.
//
// Each static mistake has one error type whose name says what went wrong and whose template
// arguments are the op and the shapes (or dtypes), e.g.
//   In instantiation of 'struct kiln::error::shapes_do_not_broadcast<kiln::op::add,
//                        kiln::shape<3, 4>, kiln::shape<5>, false>'
//   error: static assertion failed: kiln: operand shapes cannot be broadcast together ...
// The op that detects the mistake instantiates the type with Ok = false; a failed op still
// yields a node, with a poisoned shape that later checks accept, so one mistake gives one error.
#pragma once

#include "../core/dtype.hpp"
#include "../core/shape.hpp"
#include "ops.hpp"

namespace kiln {

template <int... A> struct axes {};
template <int... P> struct perm {};

namespace error {

#define KILN_ERROR_TYPE(NAME, PARAMS, MESSAGE)                                     \
  template <PARAMS, bool Ok>                                                       \
  struct NAME {                                                                    \
    static_assert(Ok, "kiln: " MESSAGE " (the op and shapes are named just above)"); \
    static constexpr bool value = Ok;                                              \
  }
#define KILN_COMMA ,

KILN_ERROR_TYPE(shapes_do_not_broadcast, op Op KILN_COMMA class A KILN_COMMA class B,
                "operand shapes cannot be broadcast together");
KILN_ERROR_TYPE(cannot_broadcast_to, class From KILN_COMMA class To, "shape cannot be broadcast to the target shape");
KILN_ERROR_TYPE(matmul_shapes_do_not_match, class A KILN_COMMA class B,
                "matmul needs [..., m, k] x [..., k, n] with broadcastable batch extents (a vector [k]: a row on the left, a column on the right)");
KILN_ERROR_TYPE(matmul_dtypes_differ, dtype A KILN_COMMA dtype B,
                "matmul needs operands of one dtype, as PyTorch does: cast one with kiln::cast<dtype>(x)");
KILN_ERROR_TYPE(reshape_element_counts_differ, class From KILN_COMMA class To,
                "reshape must keep the element count (at most one extent may be dyn)");
KILN_ERROR_TYPE(not_a_permutation, class Shape KILN_COMMA class Perm,
                "permute needs each axis exactly once");
KILN_ERROR_TYPE(axis_out_of_range, op Op KILN_COMMA class Shape KILN_COMMA class Axes,
                "axis out of range for this shape");
KILN_ERROR_TYPE(slice_out_of_range, class Shape KILN_COMMA class Axis_Begin_End_Step,
                "slice needs 0 <= begin <= end <= extent (negatives count from the end) and step > 0");
KILN_ERROR_TYPE(concat_shapes_do_not_match, class A KILN_COMMA class B KILN_COMMA class Axis,
                "concat needs equal extents on every axis but the concatenation axis");
KILN_ERROR_TYPE(layer_norm_shapes_do_not_match, class X KILN_COMMA class Gamma KILN_COMMA class Beta,
                "layer_norm needs gamma and beta of equal shape covering x's trailing axes");
KILN_ERROR_TYPE(linear_shapes_do_not_match, class X KILN_COMMA class W KILN_COMMA class B,
                "linear needs x [..., in], w [out, in] and b [out]");
KILN_ERROR_TYPE(attention_shapes_do_not_match, class Q KILN_COMMA class K KILN_COMMA class V KILN_COMMA class Mask,
                "scaled_dot_product_attention needs q [..., h, tq, d], k [..., hk, tk, d], v [..., hk, tk, dv] with "
                "equal leading extents, hk dividing h, and a mask that broadcasts to [..., h, tq, tk]");
KILN_ERROR_TYPE(attention_default_scale_needs_a_static_head_size, class Q,
                "scaled_dot_product_attention's default scale 1 / sqrt(d) needs q's last extent static: pass a "
                "scale");
KILN_ERROR_TYPE(grouped_attention_needs_at_most_one_dyn_extent, class Q KILN_COMMA class K,
                "grouped-query attention (fewer k/v heads than q heads) views q, k and v with a heads-per-group "
                "axis, which allows one dyn extent in each");
KILN_ERROR_TYPE(cross_entropy_shapes_do_not_match, class Logits KILN_COMMA class Labels,
                "cross_entropy needs logits [n, classes] and labels [n]");
KILN_ERROR_TYPE(labels_must_be_integers, dtype Labels, "cross_entropy needs integer labels");
KILN_ERROR_TYPE(dtype_not_supported, op Op KILN_COMMA dtype D, "this op does not accept this dtype");
KILN_ERROR_TYPE(where_condition_not_bool, dtype Condition, "where needs a bool condition");
KILN_ERROR_TYPE(grad_needs_a_scalar_loss, class LossShape, "grad needs a rank-0 loss (reduce it first, e.g. with mean)");
KILN_ERROR_TYPE(grad_is_taken_with_respect_to_a_placeholder, op Got,
                "grad and jvp differentiate with respect to a placeholder (kiln::input or kiln::param)");
KILN_ERROR_TYPE(integer_inputs_are_not_differentiable, dtype D, "grad and jvp need a floating-point placeholder");
KILN_ERROR_TYPE(tangent_shape_does_not_match, class Input KILN_COMMA class Tangent, "a tangent needs its input's shape");
KILN_ERROR_TYPE(custom_gradient_shape_does_not_match, class Input KILN_COMMA class Rule,
                "a custom gradient rule must give the input's shape (or one it broadcasts to)");
KILN_ERROR_TYPE(window_does_not_fit, op Op KILN_COMMA class X KILN_COMMA class Kernel_Stride_Padding_Dilation,
                "a 2-D window op needs x [n, c, h, w] with static c, h, w, a window that fits the padded input, "
                "and (pooling) padding at most half the kernel");
KILN_ERROR_TYPE(conv2d_shapes_do_not_match, class X KILN_COMMA class Weight KILN_COMMA class Bias,
                "conv2d needs x [n, c, h, w], weight [out, c, kh, kw] with static extents, and bias [out]");
KILN_ERROR_TYPE(fold_shapes_do_not_match, class Cols KILN_COMMA class Kernel_Stride_Padding_Dilation KILN_COMMA class Output,
                "fold needs columns [n, c * kh * kw, positions] whose positions are the window's in the output");
KILN_ERROR_TYPE(shape_has_too_many_elements, op Op KILN_COMMA class Shape,
                "a shape may count at most 2^59 elements (kiln::max_elements), so that byte counts and "
                "offsets never overflow");
KILN_ERROR_TYPE(indices_must_be_integers, op Op KILN_COMMA dtype Index, "indices must be an integer tensor");
KILN_ERROR_TYPE(gather_shapes_do_not_match, op Op KILN_COMMA class Table KILN_COMMA class Index,
                "gather needs a table of rank >= 1 (rows on axis 0); scatter_add a source shaped [...index, ...row]");
KILN_ERROR_TYPE(gather_along_shapes_do_not_match, op Op KILN_COMMA class X KILN_COMMA class Index KILN_COMMA class Axis,
                "gather<axis> and scatter_add<axis> need static extents and an index of x's rank, its extents at "
                "most x's on every other axis (and at most src's on every axis)");
KILN_ERROR_TYPE(pool_options_do_not_fit, op Op KILN_COMMA class X KILN_COMMA class Options,
                "pooling needs x [n, c, h, w] with static c, h, w, kernel, stride and dilation >= 1, padding at most "
                "half the kernel, a window that fits, no dilation for avg_pool2d and no count_include_pad or "
                "divisor_override for max_pool2d");
KILN_ERROR_TYPE(seed_must_be_a_rank0_i64, class Seed KILN_COMMA dtype D, "a random op's seed is a rank-0 i64 value");
KILN_ERROR_TYPE(outputs_cannot_nest, op Got, "kiln::outputs takes expressions, not another kiln::outputs");

#undef KILN_COMMA
#undef KILN_ERROR_TYPE

}  // namespace error

/// Window attributes carried in one type for error messages.
template <index_t Kernel, index_t Stride, index_t Padding, index_t Dilation> struct window_args {};

/// Slice attributes carried in one type for error messages.
template <int Axis, index_t Begin, index_t End, index_t Step> struct slice_args {};

}  // namespace kiln
