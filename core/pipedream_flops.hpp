#pragma once
// FLOPs and bytes of the nodes of PipeDream's graph.txt, derived from each
// node's operator text and its activation and parameter sizes, and the fit
// of a GPU's efficiency curves to the measured times (docs/devices.md).

#include <optional>
#include <string>
#include <vector>

#include "core/device_model.hpp"
#include "core/profile.hpp"

namespace pipegrid {

/// What a graph.txt node costs, in the analytic fields of a Layer.
struct NodeCost {
  /// false: an operation PipeDream's profiler does not time (Add, Concat,
  /// __getitem__, View, Size, hidden, Input: functional operations outside
  /// any module); the fields below are then 0.
  bool timed = false;
  std::string op;  ///< Layer::op vocabulary
  double forward_flops = 0, backward_input_flops = 0, backward_weight_flops = 0;
  double bytes_read = 0, bytes_written = 0;
  int steps = 1;  ///< sequential steps (an LSTM's time steps)
};

/** The cost of one node from its operator text, for a micro-batch of
 *  `batch_size` samples (FLOPs count a multiply-add as 2):
 *  - Conv2d(cin, cout, kernel_size=(kh, kw), ..., groups=g): P output
 *    positions = output bytes / (4 cout); forward 2 P cout (cin/g) kh kw,
 *    input gradient the same (0 when `input_needs_grad` is false: a first
 *    layer), weight gradient the same;
 *  - Linear(in_features=i, out_features=o) (and GNMT's Classifier, its
 *    inner Linear): R = output bytes / (4 o) rows; 2 R i o each pass;
 *  - LSTM(i, h[, bidirectional=True]): T = outputs[0] / (4 B h d) steps, d
 *    directions; 2 d T B 4h (i + h) each pass; EmuBidirLSTM: two LSTM(i, h)
 *    over T = output / (8 B h) steps; RecurrentAttention: its LSTM(i, h)
 *    over T = outputs[0] / (4 B h) decoder steps plus the Bahdanau attention
 *    over S = outputs[4] / (4 B T) encoder steps (2 B h h (T + S) for
 *    linear_q and linear_k, 4 B T S h for scores and context);
 *  - BatchNorm2d (norm: reads its input twice), ReLU and Dropout
 *    (elementwise), MaxPool2d and AvgPool2d (pool), Embedding (no FLOPs,
 *    no input gradient): FLOPs per element (docs/devices.md), memory-bound.
 *  bytes_read = `input_bytes` + `parameter_bytes` (x2 input for a norm),
 *  bytes_written = the node's output bytes (the sum of `outputs`).
 *  Throws InputError naming `origin` on an operator whose text cannot be
 *  read or whose sizes are inconsistent; unknown operators are timed with
 *  no FLOPs as elementwise. */
NodeCost pipedream_node_cost(const std::string& description, const std::vector<double>& outputs, double input_bytes,
                             double parameter_bytes, int batch_size, bool input_needs_grad, const std::string& origin);

/// A graph.txt node with its measured times and its cost.
struct PipeDreamNode {
  std::string name;  ///< as the profile layer's name: "node4: Embedding(...)"
  double forward_s = 0, backward_s = 0, parameter_bytes = 0;
  NodeCost cost;
  /// Whether the node counts in fits and comparisons: timed, and not
  /// recorded as 0 ms in both passes (PipeDream's profiler saw no kernel).
  bool measured = false;
};

struct PipeDreamModel {
  std::string name;  ///< the profile's name (its directory: "vgg16")
  int batch_size = 0;
  std::vector<PipeDreamNode> nodes;  ///< Input nodes excluded, in chain order
};

/** Reads a graph.txt (read_model_graph; the batch size inferred when not
 *  given) and costs every node. */
PipeDreamModel read_pipedream_model(const std::string& path, std::optional<int> batch_size = std::nullopt);

/** The node as a profile layer of the analytic fields (times_given false). */
Layer node_layer(const PipeDreamNode& node);

/** Fits a GPU's efficiency curves (by OpClass, forward and backward) to the
 *  measured nodes of `models` with fit_time_line: conv and matmul nodes
 *  taken as compute-bound (size FLOPs), memory nodes as memory-bound (size
 *  bytes); each backward sample sums its I and W parts. Compute curves are
 *  relative to `peak_flops`, memory curves to `bandwidth_Bps`; the compute
 *  classes take the memory class's memory curves, the memory class a
 *  compute curve of e_max kMaxComputeEfficiency, half 0. Every slope is
 *  bounded by the caps (kMaxComputeEfficiency, kMaxMemoryEfficiency): a
 *  class whose free fit runs faster is held at its cap, its half refitted. */
void fit_efficiency(const std::vector<PipeDreamModel>& models, double peak_flops, double bandwidth_Bps,
                    ClassEfficiency (&out)[kOpClassCount]);

}  // namespace pipegrid
