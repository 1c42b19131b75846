#pragma once
// The thread matching that every in-process transport needs, whatever a
// message holds (a CPU tensor; a GPU tensor and the event that ends its
// copy): keyed mailboxes for point-to-point messages and a rendezvous for
// collectives, both woken with an error by abort(). LibTorch-free.

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "validate/transport.hpp"

namespace pipegrid::validate::detail {

/** One mailbox per device; messages matched by key, never by order. */
template <typename Message>
class Mailboxes {
 public:
  explicit Mailboxes(int devices) {
    for (int d = 0; d < devices; ++d) boxes_.push_back(std::make_unique<Box>());
  }

  void post(int to, const MessageKey& key, Message message) {
    Box& box = *boxes_.at(to);
    {
      std::lock_guard lock(box.mutex);
      box.messages[key] = std::move(message);
    }
    box.arrived.notify_all();
  }

  /** Waits for message `key` to `device` and removes it; std::runtime_error
   *  with abort()'s reason once aborted. */
  Message take(int device, const MessageKey& key) {
    Box& box = *boxes_.at(device);
    std::unique_lock lock(box.mutex);
    box.arrived.wait(lock, [&] { return box.aborted || box.messages.count(key) > 0; });
    if (box.aborted) throw std::runtime_error(box.reason);
    auto found = box.messages.find(key);
    Message message = std::move(found->second);
    box.messages.erase(found);
    return message;
  }

  void abort(const std::string& reason) {
    for (auto& box : boxes_) {
      {
        std::lock_guard lock(box->mutex);
        box->aborted = true;
        box->reason = reason;
      }
      box->arrived.notify_all();
    }
  }

 private:
  struct Box {
    std::mutex mutex;
    std::condition_variable arrived;
    std::map<MessageKey, Message> messages;
    bool aborted = false;
    std::string reason;
  };
  std::vector<std::unique_ptr<Box>> boxes_;
};

/** All-reduce rendezvous: each participant joins with its contribution and
 *  gets every rank's once all have joined; the last to leave forgets the
 *  round. */
template <typename Contribution>
class Rendezvous {
 public:
  using Contributions = std::vector<Contribution>;

  /** Deposits `mine` as rank `rank` of `participants` for `key` and waits for
   *  the others; std::logic_error for a rank that does not fit (out of range,
   *  twice, or another participant count), std::runtime_error once aborted.
   *  The contributions stay valid until this participant calls leave(). */
  std::shared_ptr<const Contributions> join(const AllReduceKey& key, int rank, int participants, Contribution mine) {
    std::unique_lock lock(mutex_);
    std::shared_ptr<Round>& slot = rounds_[key];
    if (!slot) slot = std::make_shared<Round>(participants);
    std::shared_ptr<Round> round = slot;
    if (static_cast<int>(round->given.size()) != participants || rank < 0 || rank >= participants || round->given[rank])
      throw std::logic_error(fmt::format("all-reduce stage {} round {}: rank {} of {} does not fit the participants", key.stage,
                                         key.round, rank, participants));
    round->contributions[rank] = std::move(mine);
    round->given[rank] = true;
    ++round->joined;
    changed_.notify_all();
    changed_.wait(lock, [&] { return aborted_ || round->joined == participants; });
    if (aborted_) throw std::runtime_error(reason_);
    return std::shared_ptr<const Contributions>(round, &round->contributions);
  }

  /** This participant is done with round `key`'s contributions. */
  void leave(const AllReduceKey& key) {
    std::lock_guard lock(mutex_);
    auto found = rounds_.find(key);
    if (found != rounds_.end() && ++found->second->left == static_cast<int>(found->second->given.size())) rounds_.erase(found);
  }

  void abort(const std::string& reason) {
    {
      std::lock_guard lock(mutex_);
      aborted_ = true;
      reason_ = reason;
    }
    changed_.notify_all();
  }

 private:
  struct Round {
    explicit Round(int participants) : contributions(participants), given(participants, false) {}
    Contributions contributions;
    std::vector<bool> given;
    int joined = 0, left = 0;
  };
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<AllReduceKey, std::shared_ptr<Round>> rounds_;
  bool aborted_ = false;
  std::string reason_;
};

}  // namespace pipegrid::validate::detail
