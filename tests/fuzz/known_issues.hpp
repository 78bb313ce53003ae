// Tessel bugs the fuzzer found, each with a switch that keeps the fuzzer away from it until it is
// fixed: then set the switch to false (or delete it and its uses) and the fuzzer covers the case
// again. Each comment has a minimal reproducer.
#pragma once

namespace fuzz {

// An expression reading exactly the elements it writes (a = a * 2, a += b: documented as allowed)
// is rejected as an overlap when the output has a dim of size 1: run() compares the operand's
// broadcast strides (0 for a size-1 dim) with the output's own strides (not 0 there).
//   auto a = tessel::zeros<float>({4, 1});
//   (a += a).run();          // InvalidArgument: operand 0 ... overlaps the output at other positions
//   auto s = tessel::zeros<float>({1});
//   (s = s * 2).run();       // the same
// While set, in-place forms and chains run on shapes without size-1 dims.
inline constexpr bool known_issue_alias_size1_dims = false;  // fixed in 61643e6

// sort, argsort, cumsum and cumprod of a rank-0 tensor accept any axis, where every other
// axis-taking op checks it (reductions, softmax: InvalidArgument; transpose, squeeze: 0 or -1).
//   auto s = tessel::zeros<float>({});
//   tessel::sort(s, 5);      // accepted, as is tessel::cumsum(s, -7)
// While set, the bad-axis steps of the sort family use tensors of rank 1 and more only.
inline constexpr bool known_issue_scalar_axis_unchecked = false;  // fixed

}  // namespace fuzz
