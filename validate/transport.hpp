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

class Transport {
 public:
  virtual ~Transport() = default;
  /** Delivers a copy of `tensor` to device `to` under `key`. Returns once the
   *  data is copied (the caller may then free or modify its tensor); never
   *  waits for the receiver (eager). */
  virtual void send(int to, const MessageKey& key, const at::Tensor& tensor) = 0;
  /** Waits until the message `key` addressed to `device` has arrived, and
   *  returns it (removed from the transport; a plain tensor without autograd
   *  history). Throws std::runtime_error once abort() was called. */
  virtual at::Tensor receive(int device, const MessageKey& key) = 0;
  /** Wakes every waiting receiver with an error saying `reason` (a worker
   *  failed), so that no thread waits forever. */
  virtual void abort(const std::string& reason) = 0;
};

/** Queues between threads of one process, one mailbox per device. */
std::unique_ptr<Transport> make_in_process_transport(int devices);

}  // namespace pipegrid::validate
