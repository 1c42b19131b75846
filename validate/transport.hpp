#pragma once
// How the executor moves activations and gradients between devices. Small on
// purpose: an in-process implementation (queues between worker threads) for
// the threads launcher, and a c10d one (validate/c10d.cpp: Gloo or NCCL
// process groups, one process per device) for the processes and env
// launchers, which sends `tensor` with a tag made of the key and receives
// into a buffer of the shape the receiver expects.
//
// LibTorch-free header: at::Tensor is only declared.

#include <compare>
#include <memory>
#include <string>
#include <vector>

namespace at {
class Tensor;
}

namespace pipegrid::validate {

/** Names one message. Messages are matched by key, never by arrival order,
 *  so they are ordered per (stage, micro-batch, mini-batch) whatever the
 *  threads do. */
struct MessageKey {
  enum class Kind {
    Activation,  ///< output of stage `stage` - 1's forward, input of `stage`'s forward
    Gradient,    ///< input gradient of stage `stage` + 1's backward, consumed by `stage`'s backward
  };
  Kind kind = Kind::Activation;
  int stage = 0;  ///< the consuming stage
  int micro_batch = 0;
  int mini_batch = 0;
  friend auto operator<=>(const MessageKey&, const MessageKey&) = default;
};

/** Names one all-reduce: the Program's (stage, round), and for a per-layer
 *  (wait-free) all-reduce the layer (counted from the stage's first layer;
 *  -1: the whole stage). Every participant calls all_reduce with this key. */
struct AllReduceKey {
  int stage = 0;
  int round = 0;
  int layer = -1;
  friend auto operator<=>(const AllReduceKey&, const AllReduceKey&) = default;
};

/** A moment on a device's timeline, resolved by the backend that made it
 *  once the devices are idle (validate/detail/backend.hpp): on a CPU
 *  CLOCK_MONOTONIC read at once (`seconds`, shared by the processes of
 *  one host); on a GPU
 *  an event recorded on a stream (`event`, opaque here), whose time is known
 *  only after the stream reached it. */
struct Stamp {
  double seconds = 0;
  std::shared_ptr<void> event;
};

/** When a copy ran: on a CPU the send call itself (in-process: the copy;
 *  c10d: the copy and the posting of the send); on a GPU the copy on the
 *  sender's copy stream, from the moment it could start (the producing
 *  compute done) to its end. */
struct CopyInterval {
  Stamp start;
  Stamp end;
};

class Transport {
 public:
  virtual ~Transport() = default;
  /** Delivers a copy of `tensor` to device `to` under `key`, called on the
   *  sending worker's thread. Returns once the copy is made or, on a GPU,
   *  enqueued behind the work that produced `tensor` (the caller may then
   *  free or reuse its tensor); never waits for the receiver (eager). */
  virtual CopyInterval send(int to, const MessageKey& key, const at::Tensor& tensor) = 0;
  /** Waits until the message `key` addressed to `device` has arrived, and
   *  returns it (removed from the transport; a plain tensor without autograd
   *  history, on the receiving device, safe to use on the receiving worker's
   *  current stream). Throws std::runtime_error once abort() was called. */
  virtual at::Tensor receive(int device, const MessageKey& key) = 0;
  /** Sums `tensors` element-wise over the `participants` workers that call
   *  it with `key` (each with its own `rank`, 0 to participants - 1, and
   *  tensors of the same shapes and dtype on its own device) and writes the
   *  sum into `tensors` in place. Every participant gets bitwise the same
   *  sum: the contributions are added in rank order. Blocks the calling
   *  worker until every participant has joined and its sum is written (on a
   *  GPU: until the sum is enqueued on the worker's current stream, which
   *  then waits for it). Returns when the caller's part ran, from its
   *  joining to its sum written. Throws std::runtime_error once abort() was
   *  called, std::logic_error when participants disagree on the count. */
  virtual CopyInterval all_reduce(int device, const AllReduceKey& key, int rank, int participants,
                                  const std::vector<at::Tensor>& tensors) = 0;
  /** Wakes every waiting receiver with an error saying `reason` (a worker
   *  failed), so that no thread waits forever. */
  virtual void abort(const std::string& reason) = 0;
  /** Called once the workers have joined, before stamps are read: waits
   *  until every send has been delivered and its stamps are final (the c10d
   *  transport's sends complete in the background). Throws
   *  std::runtime_error when one failed. */
  virtual void finish() {}
};

/** Queues between threads of one process, one mailbox per device, for CPU
 *  devices: send clones the tensor; its CopyInterval is the clone's start
 *  and end on the steady clock. all_reduce: each participant deposits a
 *  flattened copy of its tensors, waits for the others, and adds them up
 *  itself in rank order (its interval on the steady clock). */
std::unique_ptr<Transport> make_in_process_transport(int devices);

}  // namespace pipegrid::validate
