#pragma once
// How the executor moves activations and gradients between devices. Small on
// purpose: an in-process implementation (queues between worker threads) is
// what runs now; a c10d implementation (Gloo/NCCL process groups, one process
// per device, RANK/WORLD_SIZE from the environment) can replace it without
// touching the executor: it would send `tensor` with a tag made of the key
// and receive into a buffer of the shape the receiver expects.
//
// LibTorch-free header: at::Tensor is only declared.

#include <compare>
#include <memory>
#include <string>

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

/** A moment on a device's timeline, resolved by the backend that made it
 *  once the devices are idle (validate/detail/backend.hpp): on a CPU the
 *  steady clock read at once (`seconds`: std::chrono::steady_clock's time
 *  since its own epoch, in seconds); on a GPU
 *  an event recorded on a stream (`event`, opaque here), whose time is known
 *  only after the stream reached it. */
struct Stamp {
  double seconds = 0;
  std::shared_ptr<void> event;
};

/** When a copy ran: on a CPU the send call itself; on a GPU the copy on the
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
  /** Wakes every waiting receiver with an error saying `reason` (a worker
   *  failed), so that no thread waits forever. */
  virtual void abort(const std::string& reason) = 0;
};

/** Queues between threads of one process, one mailbox per device, for CPU
 *  devices: send clones the tensor; its CopyInterval is the clone's start
 *  and end on the steady clock. */
std::unique_ptr<Transport> make_in_process_transport(int devices);

}  // namespace pipegrid::validate
