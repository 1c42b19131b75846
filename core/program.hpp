#pragma once
// Program: a schedule made concrete. For each device (a stage replica), one
// or more ordered action lists (streams) plus explicit extra dependencies a
// generator may add. Data dependencies are implied by the actions themselves
// and derived by the engines:
//   F(s,m) needs the output of F(s-1,m);
//   B(s,m) needs F(s,m) (its stash) and the gradient of B(s+1,m) (s < last);
//   R(s,m) needs F(s,m); a B preceded by its R on the same device needs it.
// Engines interpret this data and know nothing of schedule names.
//
// Text form (as PyTorch's pipelining schedules): `2F0` is stage 2, forward,
// micro-batch 0; `2B3@1` is stage 2, backward, micro-batch 3 of mini-batch 1
// (mini-batch 0 is not written). Stages and micro-batches count from 0.

#include <stdexcept>
#include <string>
#include <vector>

namespace pipegrid {

enum class ActionKind {
  Forward,    ///< 'F'
  Backward,   ///< 'B'
  Recompute,  ///< 'R': the forward re-run before a backward (activation recomputation)
};

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
  friend bool operator==(const Stream&, const Stream&) = default;
};

/** The work of one device: stage `stage`, replica `replica` of that stage. */
struct DeviceProgram {
  int stage = 0;
  int replica = 0;
  std::vector<Stream> streams;
  friend bool operator==(const DeviceProgram&, const DeviceProgram&) = default;
};

/** `after` may not start before `before` has ended. */
struct Dependency {
  Action before;
  Action after;
  friend bool operator==(const Dependency&, const Dependency&) = default;
};

/** Ring all-reduce of one stage's weight gradients among its replicas.
 *  Each participating device joins when its `ready` backward ends; every
 *  action in `release` waits for the all-reduce's end on its own device (on
 *  all participants when its device takes no part). A device takes part in
 *  the all-reduces in the order the Program lists them. With `per_layer`
 *  (wait-free backpropagation) each layer with parameters is all-reduced on
 *  its own, in reverse layer order, starting as soon as the ready backward
 *  has passed that layer. */
struct AllReduce {
  int stage = 0;
  int round = 0;                ///< identifies the all-reduce in timelines
  std::vector<Action> ready;    ///< one backward per participating replica, in ring order
  std::vector<Action> release;  ///< actions that may not start before it ends
  bool per_layer = false;
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
/** Parses `2F0` or `2B3@1`; throws InputError quoting `token` on error. */
Action parse_action(const std::string& token);

/** Printable, parseable, diffable text form:
 *    # pipegrid program: N stages, M micro-batches, K mini-batches
 *    device 0 stage 0 replica 0 stream 0: 0F0 0F1 0B0 ...
 *    dependency 0B0 -> 0F4
 *    allreduce stage 0 round 0: ready 0B6 0B7 release 0F0@1 0F1@1
 *    allreduce stage 0 round 0 per-layer: ready 0B0 0B1
 */
std::string program_to_text(const Program& program);
Program parse_program_text(const std::string& text, const std::string& origin);

/** Rejected Program; what() holds the explanation and a device x step grid
 *  with `<-- ERROR HERE` at the offending step. */
class ProgramError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/** Checks that a Program can run: every action of every (stage, micro-batch,
 *  mini-batch) appears exactly once (R optional, at most once, before its B
 *  on the same device), no backward precedes its forward on one stream, and
 *  the data and extra dependencies can all be met (no deadlock). Each
 *  all-reduce names backwards of its stage on distinct devices. Throws
 *  ProgramError otherwise. */
void validate_program(const Program& program);

}  // namespace pipegrid
