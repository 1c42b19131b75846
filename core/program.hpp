#pragma once
// Program: a schedule made concrete. For each device (one replica of one or
// more stages), one or more ordered action lists (streams) plus explicit
// extra dependencies a generator may add. Stages are global ids; a device
// holds one stage (the classic pipeline), several in a loop (interleaved:
// device r holds r, r+p, r+2p, ...) or in a V (device r holds r and
// 2p-1-r). Data dependencies are implied by the actions themselves and
// derived by the engines:
//   F(s,m) needs the output of F(s-1,m);
//   the gradient of stage s+1 is its B or its I (whichever it runs);
//   B(s,m) and I(s,m) need F(s,m) (the stash) and the gradient of s+1 (s < last);
//   W(s,m) needs I(s,m);
//   R(s,m) needs F(s,m); a B or I preceded by its R on the same device needs it.
// A micro-batch of a stage runs either B, or I and W. Between two stages on
// one device nothing is transferred. Engines interpret this data and know
// nothing of schedule names.
//
// Text form (as PyTorch's pipelining schedules): `2F0` is stage 2, forward,
// micro-batch 0; `2B3@1` is stage 2, backward, micro-batch 3 of mini-batch 1
// (mini-batch 0 is not written); `2I0` / `2W0` the input- and weight-gradient
// halves of a backward; `(0F7;7B3)` one overlapped forward-and-backward op.
// Stages and micro-batches count from 0.

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace pipegrid {

enum class ActionKind {
  Forward,         ///< 'F'
  Backward,        ///< 'B': the whole backward (input and weight gradients)
  Recompute,       ///< 'R': the forward re-run before a backward (activation recomputation)
  BackwardInput,   ///< 'I': the input-gradient half of a backward (zero-bubble schedules)
  BackwardWeight,  ///< 'W': the weight-gradient half, after its I
};

/** B, I: the actions that produce the gradient sent to the previous stage. */
inline bool is_input_gradient(ActionKind kind) { return kind == ActionKind::Backward || kind == ActionKind::BackwardInput; }
/** B, I, W. */
inline bool is_backward(ActionKind kind) {
  return kind == ActionKind::Backward || kind == ActionKind::BackwardInput || kind == ActionKind::BackwardWeight;
}

struct Action {
  ActionKind kind = ActionKind::Forward;
  int stage = 0;
  int micro_batch = 0;
  int mini_batch = 0;
  friend bool operator==(const Action&, const Action&) = default;
  friend auto operator<=>(const Action&, const Action&) = default;
};

struct Stream {
  std::vector<Action> actions;
  /// Ascending positions i at which actions[i] and actions[i + 1] run as one
  /// overlapped forward-and-backward op (DualPipe's F&B: one forward and one
  /// B or I, of any stages of the device): the op starts when both can, and
  /// both results are available when it ends. Its time is a parameter of
  /// the run (simulate --fb-overlap). A position appears at most once and
  /// pairs do not chain (i + 1 is never a position too).
  std::vector<std::size_t> overlapped = {};
  friend bool operator==(const Stream&, const Stream&) = default;
};

/** The work of one device: replica `replica` of the stages `stages` (one or
 *  more, in the order the text form lists them). The other replicas of a
 *  device holding several stages are devices holding the same stages (data
 *  parallelism over whole pipelines). */
struct DeviceProgram {
  std::vector<int> stages;
  int replica = 0;
  std::vector<Stream> streams;
  bool holds(int stage) const;
  friend bool operator==(const DeviceProgram&, const DeviceProgram&) = default;
};

/** `after` may not start before `before` has ended. */
struct Dependency {
  Action before;
  Action after;
  friend bool operator==(const Dependency&, const Dependency&) = default;
};

/** Ring all-reduce of one stage's weight gradients among its replicas.
 *  Each participating device joins when its `ready` backward (a B or W of
 *  any stage that device holds: its own stage's last one, or the device's
 *  last backward when gradients are reduced after the whole backward) ends; every
 *  action in `release` waits for the all-reduce's end on its own device (on
 *  all participants when its device takes no part). A device takes part in
 *  the all-reduces in the order the Program lists them. With `per_layer`
 *  (wait-free backpropagation) each layer with parameters is all-reduced on
 *  its own, in reverse layer order, starting as soon as the ready backward
 *  has passed that layer. With `bucketed` (Megatron-Core DDP's
 *  --overlap-grad-reduce on a bucketed stage) the stage's gradients are
 *  reduced in buckets (sim::SimulationRequest::bucket_bytes), each starting
 *  as soon as the ready backward has passed the bucket's layers. */
struct AllReduce {
  int stage = 0;
  int round = 0;                ///< identifies the all-reduce in timelines
  std::vector<Action> ready;    ///< one backward per participating replica, in ring order
  std::vector<Action> release;  ///< actions that may not start before it ends
  bool per_layer = false;
  bool bucketed = false;  ///< excludes per_layer
  friend bool operator==(const AllReduce&, const AllReduce&) = default;
};

struct Program {
  int num_stages = 0;
  int micro_batches = 0;
  int mini_batches = 1;
  std::vector<DeviceProgram> devices;
  std::vector<Dependency> extra_dependencies;
  std::vector<AllReduce> all_reduces;
  friend bool operator==(const Program&, const Program&) = default;
};

char action_letter(ActionKind kind);
std::string to_string(const Action& action);
/** Parses `2F0`, `2B3@1`, `0I1`, `0W1`, `3R2`; throws InputError quoting
 *  `token` on error. */
Action parse_action(const std::string& token);

/** The device of every stage when each device holds one: stage s on device
 *  s. With v > 1 stages per device over p devices (S = p v stages): "loop",
 *  stage s on device s mod p; "v" (v = 2), stage s on device s for s < p and
 *  2p-1-s after. Returns device_of_stage[s]. */
enum class StageMap { Loop, V };
std::vector<int> stage_to_device(int num_stages, int stages_per_device, StageMap map);

/** Printable, parseable, diffable text form:
 *    # pipegrid program: N stages, M micro-batches, K mini-batches
 *    device 0 stage 0 replica 0 stream 0: 0F0 0F1 0B0 ...
 *    device 0 stages 0,7 replica 0 stream 0: 0F0 7F0 7I0 7W0 (0F7;7B3) ...
 *    dependency 0B0 -> 0F4
 *    allreduce stage 0 round 0: ready 0B6 0B7 release 0F0@1 0F1@1
 *    allreduce stage 0 round 0 per-layer: ready 0B0 0B1
 *    allreduce stage 0 round 0 bucketed: ready 0B6 0B7 release 0F0@1 0F1@1
 */
std::string program_to_text(const Program& program);
Program parse_program_text(const std::string& text, const std::string& origin);

/** Rejected Program; what() holds the explanation and a device x step grid
 *  with `<-- ERROR HERE` at the offending step. */
class ProgramError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/** Checks that a Program can run: every (stage, replica) is held by exactly
 *  one device, and the other replicas of a device holding several stages
 *  are devices holding the same stages; every action is of a stage its
 *  device holds; every (stage, micro-batch, mini-batch) has one F and either one B
 *  or one I and one W (R optional, at most once, on the device of its B or
 *  I); no backward precedes its forward on one stream; overlapped pairs are
 *  one F and one B or I; and the data and extra dependencies can all be met
 *  (no deadlock: the cycle of waits is reported with its actions). Each
 *  all-reduce names backwards (B, or W when split) on distinct devices that
 *  hold its stage, and one all-reduce per (stage, round). Throws ProgramError
 *  otherwise. */
void validate_program(const Program& program);

}  // namespace pipegrid
