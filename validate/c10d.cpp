// The c10d launchers (docs/validation.md, "Launchers and c10d"): one process
// per device, activations and gradients through point-to-point send/recv of
// a c10d process group, replicas' gradients through its all-reduce. Gloo on
// CPU devices; NCCL on GPUs in a build against a CUDA LibTorch with NCCL
// (PIPEGRID_NCCL_TRANSPORT). The calls go to the concrete process-group
// classes (ProcessGroupGloo, ProcessGroupNCCL), whose send/recv/allreduce
// signatures are the same in LibTorch 1.13 and 2.x.
//
// processes: the calling process writes the request into a fresh temporary
// folder, starts `pipegrid __rank FOLDER R` for every device R, waits, and
// merges the parts they write (run_launched_rank). env: this process is one
// rank (torchrun's variables); rank 0 gathers the parts through the store.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef PIPEGRID_NCCL_TRANSPORT
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/program.hpp"
#include "core/termination.hpp"
#include "validate/calibrate.hpp"
#include "validate/detail/c10d.hpp"
#include "validate/detail/model.hpp"
#include "validate/detail/run_part.hpp"
#include "validate/launch.hpp"

namespace pipegrid::validate {
namespace detail {

bool nccl_transport_built() {
#ifdef PIPEGRID_NCCL_TRANSPORT
  return true;
#else
  return false;
#endif
}

namespace {

using Milliseconds = std::chrono::milliseconds;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

Milliseconds milliseconds_of(double seconds) { return Milliseconds(static_cast<std::int64_t>(seconds * 1000)); }

/** The calls the transport makes, each on a concrete process group. */
class Channel {
 public:
  virtual ~Channel() = default;
  virtual WorkPtr send(at::Tensor& tensor, int to, int tag) = 0;
  virtual WorkPtr recv(at::Tensor& tensor, int from, int tag) = 0;
  virtual WorkPtr allreduce(at::Tensor& tensor) = 0;
  virtual int size() const = 0;
  /** Where this group's tensors live. */
  virtual torch::Device device() const = 0;
};

template <typename Group>
class GroupChannel : public Channel {
 public:
  GroupChannel(c10::intrusive_ptr<Group> group, int size, torch::Device device) : group_(std::move(group)), size_(size), device_(device) {}
  WorkPtr send(at::Tensor& tensor, int to, int tag) override {
    std::vector<at::Tensor> list{tensor};
    return group_->send(list, to, tag);
  }
  WorkPtr recv(at::Tensor& tensor, int from, int tag) override {
    std::vector<at::Tensor> list{tensor};
    return group_->recv(list, from, tag);
  }
  WorkPtr allreduce(at::Tensor& tensor) override {
    std::vector<at::Tensor> list{tensor};
    return group_->allreduce(list);
  }
  int size() const override { return size_; }
  torch::Device device() const override { return device_; }

 private:
  c10::intrusive_ptr<Group> group_;
  int size_;
  torch::Device device_;
};

/** How ranks find each other's Gloo endpoints. */
struct GlooNetwork {
  std::string interface;  ///< a network interface (lo), or empty: GLOO_SOCKET_IFNAME, else the host's default
};

/** A process group of `size` ranks over `store`: Gloo on cpu, NCCL on cuda. */
std::shared_ptr<Channel> make_channel(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const DeviceSpec& device,
                                      const GlooNetwork& network, double timeout_s, int cuda_device) {
  if (device.kind == "cpu") {
    auto options = c10d::ProcessGroupGloo::Options::create(milliseconds_of(timeout_s));
    std::string interface = network.interface;
    if (interface.empty())
      if (const char* named = std::getenv("GLOO_SOCKET_IFNAME"); named != nullptr && *named != '\0') interface = named;
    options->devices.push_back(interface.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                                 : c10d::ProcessGroupGloo::createDeviceForInterface(interface));
    options->threads = 2;
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
    return std::make_shared<GroupChannel<c10d::ProcessGroupGloo>>(group, size, torch::Device(torch::kCPU));
  }
#ifdef PIPEGRID_NCCL_TRANSPORT
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = milliseconds_of(timeout_s);
  auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  return std::make_shared<GroupChannel<c10d::ProcessGroupNCCL>>(group, size,
                                                                torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(cuda_device)));
#else
  (void)cuda_device;
  throw InputError(fmt::format("--device {}: this build has no NCCL process group (a CUDA LibTorch with NCCL)", device.kind));
#endif
}

/** Waits for `work`; std::runtime_error saying `what` when it fails or
 *  times out. */
void wait_for(const WorkPtr& work, double timeout_s, const std::string& what) {
  bool done = false;
  try {
    done = work->wait(milliseconds_of(timeout_s));
  } catch (const std::exception& error) {
    throw std::runtime_error(fmt::format("{}: {}", what, error.what()));
  }
  if (!done) throw std::runtime_error(fmt::format("{}: not done within {} s", what, timeout_s));
}

/** A barrier over `channel`: an all-reduce of one value. */
void barrier(Channel& channel, double timeout_s) {
  at::Tensor one = torch::ones({1}, torch::TensorOptions().device(channel.device()));
  wait_for(channel.allreduce(one), timeout_s, "barrier of the ranks");
}

// Tags: each message of a run has its own; the clock's ping-pong uses the top two.
constexpr int kPingTag = INT_MAX - 1;
constexpr int kPongTag = INT_MAX - 2;

std::int64_t tag_of(const Program& program, const MessageKey& key) {
  const std::int64_t tag =
      ((static_cast<std::int64_t>(key.mini_batch) * program.micro_batches + key.micro_batch) * program.num_stages + key.stage) * 2 +
      (key.kind == MessageKey::Kind::Gradient ? 1 : 0);
  if (tag < 0 || tag >= kPongTag)
    throw InputError(fmt::format("--launcher: {} mini-batches of {} micro-batches over {} stages need more message tags than c10d "
                                 "has (2^31)",
                                 program.mini_batches, program.micro_batches, program.num_stages));
  return tag;
}

std::string describe(const MessageKey& key) {
  return fmt::format("{} of stage {} micro-batch {} mini-batch {}", key.kind == MessageKey::Kind::Activation ? "activation" : "gradient",
                     key.stage, key.micro_batch, key.mini_batch);
}

/** A message a local stream will receive, in the stream's order. */
struct Incoming {
  MessageKey key;
  int from = 0;  ///< the sending rank (device)
};

/** Shape and dtype of a message's tensor. */
struct Shape {
  std::vector<std::int64_t> sizes;
  at::ScalarType dtype = at::kFloat;
};

/** Waits for a peer's sends in the order they were made, in the
 *  background, keeping each tensor alive until it is sent; remembers the
 *  first failure. */
class SendCompleter {
 public:
  explicit SendCompleter(double timeout_s) : timeout_s_(timeout_s), thread_([this] { loop(); }) {}
  ~SendCompleter() {
    {
      std::lock_guard lock(mutex_);
      closing_ = true;
      // Sends still queued at destruction (a failed run) are given up.
      for (Pending& pending : queue_) try_abort(pending.work);
      if (current_) try_abort(current_);
    }
    changed_.notify_all();
    thread_.join();
  }
  SendCompleter(const SendCompleter&) = delete;
  SendCompleter& operator=(const SendCompleter&) = delete;

  void add(WorkPtr work, at::Tensor tensor, std::string what) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back({std::move(work), std::move(tensor), std::move(what)});
    }
    changed_.notify_all();
  }

  /** Waits until every send so far has completed; rethrows the first failure. */
  void drain() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return queue_.empty() && !current_; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  struct Pending {
    WorkPtr work;
    at::Tensor tensor;  // alive until sent
    std::string what;
  };
  static void try_abort(const WorkPtr& work) {
    try {
      work->abort();
    } catch (const std::exception&) {
    }
  }
  void loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return closing_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Pending pending = std::move(queue_.front());
      queue_.pop_front();
      current_ = pending.work;
      const bool closing = closing_;
      lock.unlock();
      std::exception_ptr failure;
      if (!closing) {
        try {
          wait_for(pending.work, timeout_s_, "sending " + pending.what);
        } catch (...) {
          failure = std::current_exception();
        }
      }
      lock.lock();
      if (failure && !error_) error_ = failure;
      current_.reset();
      changed_.notify_all();
    }
  }

  double timeout_s_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Pending> queue_;
  WorkPtr current_;
  bool closing_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the rest is in place
};

/** Messages through a c10d process group, one rank per device. Sends are
 *  eager (posted, completed in the background: a worker never waits for its
 *  receiver); a send's CopyInterval is the sender's part, the copy of the
 *  tensor and the posting (the transfer shows in the receiver's wait), as
 *  the in-process transport's is its copy. Each local stream keeps the receives of its next kWindow
 *  incoming messages posted, so a transfer can start before the receiver
 *  reaches the action. All-reduces: one process group per replicated stage. */
class C10dTransport : public Transport {
 public:
  /** `activations` and `gradients` carry the two kinds of messages (one
   *  group for both with Gloo, which matches by tag; two with NCCL, which
   *  matches a pair's messages in posting order and serialises them on one
   *  stream per group: apart, a rank's activation send never queues behind
   *  its gradient receive). `window`: receives posted ahead per stream (0:
   *  posted when the worker asks, the only order NCCL can match). `now`:
   *  the backend's stamp of the calling worker's device. */
  C10dTransport(const Program& program, std::shared_ptr<Channel> activations, std::shared_ptr<Channel> gradients,
                std::map<int, std::shared_ptr<Channel>> stage_groups, std::vector<std::vector<Incoming>> inbox,
                std::map<MessageKey, Shape> shapes, std::size_t window, std::function<Stamp()> now, double timeout_s)
      : program_(program),
        activations_(std::move(activations)),
        gradients_(std::move(gradients)),
        stage_groups_(std::move(stage_groups)),
        inbox_(std::move(inbox)),
        shapes_(std::move(shapes)),
        window_(window),
        now_(std::move(now)),
        timeout_s_(timeout_s),
        next_(inbox_.size(), 0) {
    for (std::size_t s = 0; s < inbox_.size(); ++s)
      for (std::size_t i = 0; i < inbox_[s].size(); ++i) index_[inbox_[s][i].key] = {s, i};
    std::lock_guard lock(mutex_);
    for (std::size_t s = 0; s < inbox_.size(); ++s) post_up_to(s, window_);
  }

  ~C10dTransport() override {
    std::lock_guard lock(mutex_);
    for (auto& [key, posted] : posted_) try_abort(posted.work);
  }

  CopyInterval send(int to, const MessageKey& key, const at::Tensor& tensor) override {
    CopyInterval interval;
    interval.start = now_();
    at::Tensor copy = tensor.detach().clone(at::MemoryFormat::Contiguous);
    WorkPtr work;
    SendCompleter* completer = nullptr;
    {
      std::lock_guard lock(mutex_);
      if (aborted_) throw std::runtime_error(reason_);
      work = channel_of(key).send(copy, to, static_cast<int>(tag_of(program_, key)));
      std::unique_ptr<SendCompleter>& slot = completers_[to];
      if (!slot) slot = std::make_unique<SendCompleter>(timeout_s_);
      completer = slot.get();
    }
    completer->add(std::move(work), std::move(copy), fmt::format("{} to rank {}", describe(key), to));
    interval.end = now_();
    return interval;
  }

  at::Tensor receive(int, const MessageKey& key) override {
    Posted posted;
    int from = 0;
    {
      std::lock_guard lock(mutex_);
      if (aborted_) throw std::runtime_error(reason_);
      const auto at = index_.find(key);
      if (at == index_.end()) throw std::logic_error(fmt::format("c10d transport: no receive planned for {}", describe(key)));
      const auto [stream, position] = at->second;
      from = inbox_[stream][position].from;
      post_up_to(stream, position + std::max<std::size_t>(window_, 1));
      posted = posted_.at(key);
    }
    const std::string what = fmt::format("receiving {} from rank {}", describe(key), from);
    bool done = false;
    std::string failure;
    try {
      done = posted.work->wait(milliseconds_of(timeout_s_));
    } catch (const std::exception& error) {
      failure = error.what();
    }
    std::lock_guard lock(mutex_);
    posted_.erase(key);
    if (aborted_) throw std::runtime_error(reason_);
    if (!failure.empty()) throw std::runtime_error(fmt::format("{}: {}", what, failure));
    if (!done) throw std::runtime_error(fmt::format("{}: not done within {} s", what, timeout_s_));
    return posted.buffer;
  }

  CopyInterval all_reduce(int, const AllReduceKey& key, int, int participants, const std::vector<at::Tensor>& tensors) override {
    CopyInterval interval;
    interval.start = now_();
    const auto found = stage_groups_.find(key.stage);
    if (found == stage_groups_.end())
      throw std::logic_error(fmt::format("c10d transport: no process group for the replicas of stage {}", key.stage));
    Channel& group = *found->second;
    if (group.size() != participants)
      throw std::logic_error(fmt::format("all-reduce stage {} round {}: {} participants, the stage's group has {} ranks", key.stage,
                                         key.round, participants, group.size()));
    std::vector<torch::Tensor> flat;
    for (const torch::Tensor& tensor : tensors) flat.push_back(tensor.detach().reshape({-1}));
    torch::Tensor sum = torch::cat(flat);
    {
      std::lock_guard lock(mutex_);
      if (aborted_) throw std::runtime_error(reason_);
    }
    wait_for(group.allreduce(sum), timeout_s_, fmt::format("all-reduce of stage {} round {}", key.stage, key.round));
    std::int64_t offset = 0;
    {
      torch::NoGradGuard no_grad;
      for (const torch::Tensor& tensor : tensors) {
        tensor.copy_(sum.narrow(0, offset, tensor.numel()).view(tensor.sizes()));
        offset += tensor.numel();
      }
    }
    interval.end = now_();
    return interval;
  }

  void abort(const std::string& reason) override {
    std::lock_guard lock(mutex_);
    if (aborted_) return;
    aborted_ = true;
    reason_ = reason;
    for (auto& [key, posted] : posted_) try_abort(posted.work);
  }

  void finish() override {
    std::map<int, SendCompleter*> completers;
    {
      std::lock_guard lock(mutex_);
      for (auto& [to, completer] : completers_) completers[to] = completer.get();
    }
    for (auto& [to, completer] : completers) completer->drain();
  }

 private:
  struct Posted {
    at::Tensor buffer;
    WorkPtr work;
  };
  static void try_abort(const WorkPtr& work) {
    try {
      work->abort();
    } catch (const std::exception&) {
    }
  }
  Channel& channel_of(const MessageKey& key) { return key.kind == MessageKey::Kind::Activation ? *activations_ : *gradients_; }
  /** Posts stream `stream`'s receives before position `end` (mutex held). */
  void post_up_to(std::size_t stream, std::size_t end) {
    end = std::min(end, inbox_[stream].size());
    for (; next_[stream] < end; ++next_[stream]) {
      const Incoming& incoming = inbox_[stream][next_[stream]];
      const Shape& shape = shapes_.at(incoming.key);
      Posted posted;
      Channel& channel = channel_of(incoming.key);
      posted.buffer = torch::empty(shape.sizes, torch::TensorOptions().dtype(shape.dtype).device(channel.device()));
      posted.work = channel.recv(posted.buffer, incoming.from, static_cast<int>(tag_of(program_, incoming.key)));
      posted_[incoming.key] = posted;
    }
  }

  const Program& program_;
  std::shared_ptr<Channel> activations_, gradients_;
  std::map<int, std::shared_ptr<Channel>> stage_groups_;
  std::vector<std::vector<Incoming>> inbox_;
  std::map<MessageKey, Shape> shapes_;
  std::size_t window_;
  std::function<Stamp()> now_;
  double timeout_s_;
  std::mutex mutex_;
  std::vector<std::size_t> next_;
  std::map<MessageKey, std::pair<std::size_t, std::size_t>> index_;
  std::map<MessageKey, Posted> posted_;
  std::map<int, std::unique_ptr<SendCompleter>> completers_;
  bool aborted_ = false;
  std::string reason_;
};

/** What device `device`'s streams receive from other devices, in each
 *  stream's order (the executor's receives: a forward's input from the
 *  previous stage, a B's or I's output gradient from the next). */
std::vector<std::vector<Incoming>> inbox_of(const Program& program, int device) {
  const std::map<Action, int> device_of = device_of_actions(program);
  const auto running = [&](int stage, const Action& a) { return device_of.at({ActionKind::Forward, stage, a.micro_batch, a.mini_batch}); };
  std::vector<std::vector<Incoming>> inbox;
  for (const Stream& stream : program.devices.at(device).streams) {
    std::vector<Incoming>& mine = inbox.emplace_back();
    for (const Action& a : stream.actions) {
      if (a.kind == ActionKind::Forward && a.stage > 0 && running(a.stage - 1, a) != device)
        mine.push_back({{MessageKey::Kind::Activation, a.stage, a.micro_batch, a.mini_batch}, running(a.stage - 1, a)});
      if ((a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardInput) && a.stage < program.num_stages - 1 &&
          running(a.stage + 1, a) != device)
        mine.push_back({{MessageKey::Kind::Gradient, a.stage, a.micro_batch, a.mini_batch}, running(a.stage + 1, a)});
    }
  }
  return inbox;
}

/** The shapes of the messages in `inbox`: the output of every stage but the
 *  last, from one forward of the whole model on micro-batch 0 (every
 *  micro-batch has the same shapes). */
std::map<MessageKey, Shape> shapes_of(const ExecutionRequest& request, const std::vector<std::vector<Incoming>>& inbox) {
  std::map<MessageKey, Shape> shapes;
  bool any = false;
  for (const auto& stream : inbox) any = any || !stream.empty();
  if (!any) return shapes;
  std::vector<Shape> outputs;  // output of stage s
  {
    torch::NoGradGuard no_grad;
    const LayerList layers = build_layers(request.model, request.seed);
    torch::Tensor value = make_batch(request.model, request.seed, 0, 0, request.micro_batch_size).input;
    for (const auto& [first, last] : request.stages) {
      value = run_layers(layers, first, last, value);
      outputs.push_back({value.sizes().vec(), value.scalar_type()});
    }
  }
  for (const auto& stream : inbox)
    for (const Incoming& incoming : stream)
      shapes[incoming.key] = outputs.at(incoming.key.kind == MessageKey::Kind::Activation ? incoming.key.stage - 1 : incoming.key.stage);
  return shapes;
}

/** One rank's part of a run: its stage groups, transport and device. */
RunPart run_rank(const ExecutionRequest& request, int rank, const std::shared_ptr<Channel>& world,
                 const c10::intrusive_ptr<c10d::Store>& store, const std::string& prefix, const GlooNetwork& network) {
  const Program& program = request.program;
  const double timeout_s = request.launcher.timeout_s;
  const int devices = static_cast<int>(program.devices.size());
  // One process group per replicated stage, its ranks the stage's devices in
  // ascending order; every member creates them in stage order.
  std::map<int, std::shared_ptr<Channel>> stage_groups;
  for (int stage = 0; stage < program.num_stages; ++stage) {
    bool reduced = false;
    for (const AllReduce& all_reduce : program.all_reduces) reduced = reduced || all_reduce.stage == stage;
    std::vector<int> members;
    for (std::size_t d = 0; d < program.devices.size(); ++d)
      if (program.devices[d].holds(stage)) members.push_back(static_cast<int>(d));
    const auto mine = std::find(members.begin(), members.end(), rank);
    if (!reduced || members.size() < 2 || mine == members.end()) continue;
    auto group_store = c10::make_intrusive<c10d::PrefixStore>(fmt::format("{}/stage{}", prefix, stage), store);
    stage_groups[stage] = make_channel(group_store, static_cast<int>(mine - members.begin()), static_cast<int>(members.size()),
                                       request.device, network, timeout_s, rank);
  }
  std::vector<std::vector<Incoming>> inbox = inbox_of(program, rank);
  std::map<MessageKey, Shape> shapes = shapes_of(request, inbox);
  std::unique_ptr<Backend> backend = request.device.kind == "cpu"
                                         ? make_cpu_backend(devices)
                                         : make_cuda_backend(request.device, devices, request.copy_through_host);
  // Gloo: one group for both kinds of messages, receives posted ahead. NCCL:
  // a group per kind, receives posted in order (see C10dTransport).
  std::shared_ptr<Channel> activations = world, gradients = world;
  std::size_t window = 4;
  if (request.device.kind != "cpu") {
    activations = make_channel(c10::make_intrusive<c10d::PrefixStore>(prefix + "/activations", store), rank, devices, request.device,
                               network, timeout_s, rank);
    gradients = make_channel(c10::make_intrusive<c10d::PrefixStore>(prefix + "/gradients", store), rank, devices, request.device,
                             network, timeout_s, rank);
    window = 0;
  }
  RunPart part;
  {
    Backend& device = *backend;
    C10dTransport transport(program, activations, gradients, stage_groups, std::move(inbox), std::move(shapes), window,
                            [&device, rank] { return device.stamp(rank); }, timeout_s);
    part = run_devices(request, {rank}, *backend, transport, [&] { barrier(*world, timeout_s); });
  }
  // Every rank done before any process group goes away.
  barrier(*world, timeout_s);
  return part;
}

// ---- JSON of requests and parts (between the launcher and its ranks) ----

nlohmann::json request_to_json(const ExecutionRequest& request) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& [first, last] : request.stages) stages.push_back({first, last});
  return {{"model", model_to_spec(request.model)},
          {"stages", stages},
          {"program", program_to_text(request.program)},
          {"micro_batch_size", request.micro_batch_size},
          {"warmup_mini_batches", request.warmup_mini_batches},
          {"learning_rate", request.learning_rate},
          {"seed", request.seed},
          {"device", {{"kind", request.device.kind}, {"count", request.device.count}}},
          {"keep_state", request.keep_state},
          {"weight_rule", static_cast<int>(request.weight_rule)},
          {"update_interval", request.update_interval},
          {"copy_through_host", request.copy_through_host},
          {"timeout_s", request.launcher.timeout_s}};
}

ExecutionRequest request_from_json(const nlohmann::json& json, const std::string& origin) {
  ExecutionRequest request;
  request.model = model_from_spec(json.at("model").get<std::string>(), origin);
  for (const auto& range : json.at("stages")) request.stages.push_back({range.at(0).get<int>(), range.at(1).get<int>()});
  request.program = parse_program_text(json.at("program").get<std::string>(), origin);
  request.micro_batch_size = json.at("micro_batch_size").get<int>();
  request.warmup_mini_batches = json.at("warmup_mini_batches").get<int>();
  request.learning_rate = json.at("learning_rate").get<double>();
  request.seed = json.at("seed").get<std::uint64_t>();
  request.device = {json.at("device").at("kind").get<std::string>(), json.at("device").at("count").get<int>()};
  request.keep_state = json.at("keep_state").get<bool>();
  request.weight_rule = static_cast<WeightRule>(json.at("weight_rule").get<int>());
  request.update_interval = json.at("update_interval").get<int>();
  request.copy_through_host = json.at("copy_through_host").get<bool>();
  request.launcher.timeout_s = json.at("timeout_s").get<double>();
  return request;
}

nlohmann::json part_to_json(const RunPart& part) {
  nlohmann::json devices = nlohmann::json::array();
  for (const DevicePart& device : part.devices) {
    nlohmann::json records = nlohmann::json::array();
    for (const TimelineRecord& r : device.records)
      records.push_back({r.host, r.stream, r.stage, r.action, r.micro_batch, r.mini_batch, r.start_s, r.end_s, r.bytes, r.peer,
                         r.memory_bytes});
    nlohmann::json stages = nlohmann::json::array();
    for (const auto& [stage, state] : device.stages)
      stages.push_back({{"stage", stage}, {"weights", state.weights}, {"gradients", state.gradients}});
    devices.push_back({{"device", device.device},
                       {"host", device.host},
                       {"records", records},
                       {"steps", device.steps},
                       {"peak_memory_bytes", device.peak_memory_bytes},
                       {"stages", stages}});
  }
  return {{"origin_s", part.origin_s}, {"clock_offset_residual_s", part.clock_offset_residual_s}, {"devices", devices}};
}

RunPart part_from_json(const nlohmann::json& json) {
  RunPart part;
  part.origin_s = json.at("origin_s").get<double>();
  part.clock_offset_residual_s = json.at("clock_offset_residual_s").get<double>();
  for (const auto& entry : json.at("devices")) {
    DevicePart device;
    device.device = entry.at("device").get<int>();
    device.host = entry.at("host").get<std::string>();
    for (const auto& r : entry.at("records"))
      device.records.push_back({r.at(0).get<std::string>(), r.at(1).get<int>(), r.at(2).get<int>(), r.at(3).get<std::string>(),
                                r.at(4).get<int>(), r.at(5).get<int>(), r.at(6).get<double>(), r.at(7).get<double>(),
                                r.at(8).get<double>(), r.at(9).get<std::string>(), r.at(10).get<double>()});
    device.steps = entry.at("steps").get<std::vector<std::pair<int, double>>>();
    device.peak_memory_bytes = entry.at("peak_memory_bytes").get<std::int64_t>();
    for (const auto& stage : entry.at("stages")) {
      ModelState state;
      state.weights = stage.at("weights").get<std::vector<std::vector<float>>>();
      state.gradients = stage.at("gradients").get<std::vector<std::vector<float>>>();
      device.stages.push_back({stage.at("stage").get<int>(), std::move(state)});
    }
    part.devices.push_back(std::move(device));
  }
  return part;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("cannot read {}", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/** Writes `text` to `path` through a temporary name, so that a reader sees
 *  all of it or nothing. */
void write_text(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".partial";
  {
    std::ofstream out(temporary, std::ios::binary);
    out << text;
    if (!out.flush()) throw std::runtime_error(fmt::format("cannot write {}", temporary));
  }
  std::filesystem::rename(temporary, path);
}

// ---- copy probe (calibrate --launcher processes|env) ----

/** Ranks 0 and 1 of `world` bounce float tensors of each size; rank 0
 *  returns the median of half the round trips (send + receive one way).
 *  Other ranks take no part and return nothing. */
std::vector<CopySample> probe_copies(Channel& world, int rank, int warmup, int repeats, double timeout_s) {
  std::vector<CopySample> samples;
  if (rank > 1) return samples;
  const int peer = 1 - rank;
  int tag = 0;
  for (std::int64_t floats = 256; floats <= (std::int64_t{1} << 20); floats *= 4) {
    at::Tensor tensor = torch::rand({floats}, torch::TensorOptions().device(world.device()));
    at::Tensor buffer = torch::empty_like(tensor);
    std::vector<double> times;
    for (int i = 0; i < warmup + repeats; ++i, tag += 2) {
      const double start = monotonic_seconds();
      if (rank == 0) {
        WorkPtr received = world.recv(buffer, peer, tag + 1);
        wait_for(world.send(tensor, peer, tag), timeout_s, "copy probe: send");
        wait_for(received, timeout_s, "copy probe: receive");
      } else {
        WorkPtr received = world.recv(buffer, peer, tag);
        wait_for(received, timeout_s, "copy probe: receive");
        wait_for(world.send(buffer, peer, tag + 1), timeout_s, "copy probe: send");
      }
      if (i >= warmup) times.push_back((monotonic_seconds() - start) / 2);
    }
    std::sort(times.begin(), times.end());
    const std::size_t n = times.size();
    const double median = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
    if (rank == 0) samples.push_back({static_cast<double>(floats * 4), median});
  }
  return samples;
}

// ---- the processes launcher ----

/** A fresh temporary folder, removed with everything in it on scope exit. */
class TemporaryFolder {
 public:
  TemporaryFolder() {
    const char* base = std::getenv("TMPDIR");
    std::string name = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/pipegrid-launch-XXXXXX";
    if (mkdtemp(name.data()) == nullptr) throw std::runtime_error(fmt::format("--launcher processes: cannot create {}", name));
    path_ = name;
  }
  ~TemporaryFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/** The last lines of a rank's stderr. */
std::string tail_of(const std::string& path) {
  std::string text;
  try {
    text = read_text(path);
  } catch (const std::exception&) {
    return "(no stderr)";
  }
  while (!text.empty() && text.back() == '\n') text.pop_back();
  if (text.empty()) return "(its stderr is empty)";
  std::size_t start = text.size(), lines = 0;
  while (start > 0 && lines < 12 && text.size() - start < 3000) {
    start = text.rfind('\n', start - 1);
    if (start == std::string::npos) {
      start = 0;
      break;
    }
    ++lines;
  }
  return text.substr(start == 0 ? 0 : start + 1);
}

/** Starts `world` ranks of `executable __rank FOLDER R`, waits for all of
 *  them; when one fails, stops the others and throws (InputError for a
 *  rank that exited with status 2, std::runtime_error otherwise) naming it
 *  and the end of its stderr. */
void run_ranks(const std::string& executable, const std::string& folder, int world, const std::vector<std::string>& hosts) {
  if (executable.empty()) throw std::logic_error("--launcher processes: no executable to start the ranks with");
  std::vector<pid_t> pids(world, -1);
  const auto stop_all = [&] {
    for (pid_t pid : pids)
      if (pid > 0) kill(pid, SIGTERM);
    const double deadline = monotonic_seconds() + 5;
    for (pid_t& pid : pids) {
      if (pid <= 0) continue;
      int status = 0;
      while (waitpid(pid, &status, WNOHANG) == 0) {
        if (monotonic_seconds() > deadline) {
          kill(pid, SIGKILL);
          waitpid(pid, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      forget_child(pid);
      pid = -1;
    }
  };
  for (int r = 0; r < world; ++r) {
    const std::string rank = std::to_string(r);
    const std::string out = folder + "/rank" + rank + ".stdout", err = folder + "/rank" + rank + ".stderr";
    const pid_t pid = fork_child(ChildStop::Terminate);
    if (pid == 0) {
      const int out_fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int err_fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (out_fd < 0 || err_fd < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) _exit(126);
      const char* args[] = {executable.c_str(), "__rank", folder.c_str(), rank.c_str(), nullptr};
      execv(executable.c_str(), const_cast<char* const*>(args));
      const std::string message = "pipegrid: error: cannot start " + executable + "\n";
      [[maybe_unused]] const ssize_t written = write(2, message.data(), message.size());
      _exit(127);
    }
    pids[r] = pid;
  }
  int running = world;
  while (running > 0) {
    bool progressed = false;
    for (int r = 0; r < world; ++r) {
      if (pids[r] <= 0) continue;
      int status = 0;
      const pid_t done = waitpid(pids[r], &status, WNOHANG);
      if (done == 0) continue;
      progressed = true;
      forget_child(pids[r]);
      pids[r] = -1;
      --running;
      if (done > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      std::string how = done < 0                ? "was lost"
                        : WIFEXITED(status)     ? fmt::format("exited with status {}", WEXITSTATUS(status))
                        : WIFSIGNALED(status)   ? fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)))
                                                : "stopped";
      stop_all();
      const std::string message = fmt::format("--launcher processes: rank {} ({}) {}; the other ranks were stopped. Its stderr ends with:\n{}",
                                              r, hosts.at(r), how, tail_of(folder + "/rank" + std::to_string(r) + ".stderr"));
      if (done > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 2) throw InputError(message);
      throw std::runtime_error(message);
    }
    if (!progressed) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::vector<std::string> host_names(const DeviceSpec& device, int devices) {
  std::vector<std::string> hosts;
  for (int d = 0; d < devices; ++d) hosts.push_back(fmt::format("{}{}", device.kind == "cpu" ? "cpu" : "gpu", d));
  return hosts;
}

std::string launcher_executable(const Launcher& launcher) {
  if (!launcher.executable.empty()) return launcher.executable;
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) throw std::runtime_error("--launcher processes: cannot find this program's executable (/proc/self/exe)");
  return self.string();
}

// ---- the env launcher ----

/** torchrun's variables, checked. */
struct EnvRank {
  int rank = 0, world = 0, local_rank = 0;
  std::string master_address;
  int master_port = 0;
};

int env_integer(const char* name, int low, int high, const std::string& range) {
  const char* value = std::getenv(name);
  if (value == nullptr)
    throw InputError(fmt::format("--launcher env: environment variable {} is not set (a job started by torchrun or alike sets RANK, "
                                 "WORLD_SIZE, MASTER_ADDR, MASTER_PORT and LOCAL_RANK)",
                                 name));
  const std::string text = value;
  const bool digits = !text.empty() && text.size() < 10 && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  const long parsed = digits ? std::stol(text) : -1;
  if (!digits || parsed < low || parsed > high)
    throw InputError(fmt::format("--launcher env: environment variable {}='{}': expected an integer {}", name, text, range));
  return static_cast<int>(parsed);
}

EnvRank read_env_rank() {
  EnvRank env;
  env.world = env_integer("WORLD_SIZE", 1, 1 << 20, "of at least 1");
  env.rank = env_integer("RANK", 0, env.world - 1, fmt::format("from 0 to WORLD_SIZE - 1 = {}", env.world - 1));
  env.local_rank = env_integer("LOCAL_RANK", 0, 1 << 20, "of at least 0");
  const char* address = std::getenv("MASTER_ADDR");
  if (address == nullptr)
    throw InputError("--launcher env: environment variable MASTER_ADDR is not set (the host of rank 0, whose TCP store the ranks "
                     "join)");
  env.master_address = address;
  if (env.master_address.empty()) throw InputError("--launcher env: environment variable MASTER_ADDR='': expected a host name or address");
  env.master_port = env_integer("MASTER_PORT", 1, 65535, "from 1 to 65535");
  return env;
}

/** This process's membership of the job, made at the first env run and
 *  kept for the next ones (validate runs several). */
struct EnvJob {
  EnvRank env;
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<Channel> world;
  std::string device_kind;
  bool shared_clock = true;
  double offset_s = 0;    ///< rank 0's clock minus this rank's
  double residual_s = 0;  ///< half the least round trip
  int runs = 0;
};

std::string boot_id() {
  try {
    std::string id = read_text("/proc/sys/kernel/random/boot_id");
    while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
    if (!id.empty()) return id;
  } catch (const std::exception&) {
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

std::vector<std::uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }
std::string text_of(const std::vector<std::uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

/** Each rank's offset to rank 0's clock from `rounds` ping-pongs, the
 *  sample of least round trip kept: offset = t0 - (t1 + t2) / 2, residual =
 *  (t2 - t1) / 2 (rank 0 answers at t0 a ping sent at t1 and answered at
 *  t2 on the rank's clock). Rank 0 serves the ranks one after the other. */
void estimate_offsets(EnvJob& job, double timeout_s) {
  constexpr int kRounds = 16;
  Channel& world = *job.world;
  const auto options = torch::TensorOptions().dtype(torch::kFloat64).device(world.device());
  if (job.env.rank == 0) {
    for (int r = 1; r < job.env.world; ++r)
      for (int i = 0; i < kRounds; ++i) {
        at::Tensor ping = torch::empty({1}, options);
        wait_for(world.recv(ping, r, kPingTag), timeout_s, fmt::format("clock ping from rank {}", r));
        at::Tensor now = torch::full({1}, monotonic_seconds(), options);
        wait_for(world.send(now, r, kPongTag), timeout_s, fmt::format("clock pong to rank {}", r));
      }
    return;
  }
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < kRounds; ++i) {
    at::Tensor answer = torch::empty({1}, options);
    WorkPtr pong = world.recv(answer, 0, kPongTag);
    const double t1 = monotonic_seconds();
    at::Tensor ping = torch::full({1}, t1, options);
    wait_for(world.send(ping, 0, kPingTag), timeout_s, "clock ping to rank 0");
    wait_for(pong, timeout_s, "clock pong from rank 0");
    const double t2 = monotonic_seconds();
    const double t0 = answer.to(torch::kCPU).item<double>();
    if (t2 - t1 < best) {
      best = t2 - t1;
      job.offset_s = t0 - (t1 + t2) / 2;
      job.residual_s = best / 2;
    }
  }
}

std::mutex env_mutex;
std::unique_ptr<EnvJob> env_job;

EnvJob& join_env_job(const ExecutionRequest& request, const EnvRank& env) {
  if (env_job) {
    if (env_job->device_kind != request.device.kind)
      throw InputError(fmt::format("--launcher env: this process joined the job for {} devices; a run on {} needs a new job",
                                   env_job->device_kind, request.device.kind));
    return *env_job;
  }
  const double timeout_s = request.launcher.timeout_s;
  auto job = std::make_unique<EnvJob>();
  job->env = env;
  job->device_kind = request.device.kind;
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = env.rank == 0;
  options.numWorkers = static_cast<std::size_t>(env.world);
  options.waitWorkers = true;
  options.timeout = milliseconds_of(timeout_s);
  try {
    job->store = c10::make_intrusive<c10d::TCPStore>(env.master_address, options);
  } catch (const std::exception& error) {
    throw std::runtime_error(fmt::format("--launcher env: rank {} cannot join the TCP store at {}:{}: {}", env.rank,
                                         env.master_address, env.master_port, error.what()));
  }
  job->world = make_channel(c10::make_intrusive<c10d::PrefixStore>("pipegrid/world", job->store), env.rank, env.world, request.device,
                            GlooNetwork{}, timeout_s, env.local_rank);
  // One host (the same boot): CLOCK_MONOTONIC is shared. Otherwise offsets.
  job->store->set(fmt::format("pipegrid/boot/{}", env.rank), bytes_of(boot_id()));
  std::set<std::string> boots;
  for (int r = 0; r < env.world; ++r) boots.insert(text_of(job->store->get(fmt::format("pipegrid/boot/{}", r))));
  const char* forced = std::getenv("PIPEGRID_CLOCK_SYNC");
  if (forced != nullptr && std::string(forced) != "ping-pong" && std::string(forced) != "auto")
    throw InputError(fmt::format("environment variable PIPEGRID_CLOCK_SYNC='{}': expected auto or ping-pong", forced));
  job->shared_clock = boots.size() == 1 && (forced == nullptr || std::string(forced) == "auto");
  if (!job->shared_clock) estimate_offsets(*job, timeout_s);
  env_job = std::move(job);
  return *env_job;
}

}  // namespace

ExecutionResult execute_in_processes(const ExecutionRequest& request) {
  const int world = static_cast<int>(request.program.devices.size());
  const std::string executable = launcher_executable(request.launcher);
  TemporaryFolder folder;
  write_text(folder.path() + "/job.json", nlohmann::json{{"job", "execute"}, {"request", request_to_json(request)}}.dump());
  run_ranks(executable, folder.path(), world, host_names(request.device, world));
  std::vector<RunPart> parts;
  for (int r = 0; r < world; ++r)
    parts.push_back(part_from_json(nlohmann::json::parse(read_text(folder.path() + "/part." + std::to_string(r) + ".json"))));
  ExecutionResult result = assemble(request, parts);
  result.clock = "shared CLOCK_MONOTONIC";
  return result;
}

ExecutionResult execute_from_env(const ExecutionRequest& request) {
  const EnvRank env = read_env_rank();
  const int devices = static_cast<int>(request.program.devices.size());
  if (env.world != devices)
    throw InputError(fmt::format("--launcher env: WORLD_SIZE={} but the Program has {} devices (one rank per device)", env.world, devices));
  if (request.device.kind != "cpu" && env.local_rank != env.rank)
    throw InputError(fmt::format("--launcher env --device {}: rank {} has LOCAL_RANK {}; device d runs on cuda:d, so ranks on several "
                                 "hosts are not supported on GPUs yet",
                                 request.device.kind, env.rank, env.local_rank));
  std::lock_guard lock(env_mutex);
  EnvJob& job = join_env_job(request, env);
  const std::string prefix = fmt::format("pipegrid/run{}", job.runs++);
  RunPart part = run_rank(request, env.rank, job.world, job.store, prefix, GlooNetwork{});
  part.origin_s += job.offset_s;
  part.clock_offset_residual_s = job.residual_s;
  if (env.rank != 0) {
    job.store->set(fmt::format("{}/part/{}", prefix, env.rank), bytes_of(part_to_json(part).dump()));
    ExecutionResult secondary;
    secondary.primary = false;
    return secondary;
  }
  std::vector<RunPart> parts{std::move(part)};
  for (int r = 1; r < env.world; ++r)
    parts.push_back(part_from_json(nlohmann::json::parse(text_of(job.store->get(fmt::format("{}/part/{}", prefix, r))))));
  ExecutionResult result = assemble(request, parts);
  result.clock = job.shared_clock ? "shared CLOCK_MONOTONIC" : "ping-pong offsets";
  return result;
}

std::optional<std::vector<CopySample>> measure_copies_between_ranks(const CalibrationRequest& request) {
  const double timeout_s = request.launcher.timeout_s;
  if (request.launcher.kind == Launcher::Kind::Env) {
    const EnvRank env = read_env_rank();
    if (env.world < 2) throw InputError("--launcher env: calibrate measures copies between ranks 0 and 1; WORLD_SIZE is 1");
    ExecutionRequest as_run;
    as_run.device = request.device;
    as_run.launcher = request.launcher;
    std::lock_guard lock(env_mutex);
    EnvJob& job = join_env_job(as_run, env);
    std::vector<CopySample> samples = probe_copies(*job.world, env.rank, request.warmup, request.repeats, timeout_s);
    barrier(*job.world, timeout_s);
    if (env.rank != 0) return std::nullopt;
    return samples;
  }
  TemporaryFolder folder;
  nlohmann::json job{{"job", "copies"},
                     {"device", {{"kind", request.device.kind}, {"count", 2}}},
                     {"warmup", request.warmup},
                     {"repeats", request.repeats},
                     {"timeout_s", timeout_s}};
  write_text(folder.path() + "/job.json", job.dump());
  run_ranks(launcher_executable(request.launcher), folder.path(), 2, host_names(request.device, 2));
  const nlohmann::json samples = nlohmann::json::parse(read_text(folder.path() + "/part.0.json"));
  std::vector<CopySample> copies;
  for (const auto& sample : samples.at("copies")) copies.push_back({sample.at(0).get<double>(), sample.at(1).get<double>()});
  return copies;
}

bool env_rank_is_primary() {
  const char* rank = std::getenv("RANK");
  return rank == nullptr || std::string(rank) == "0";
}

}  // namespace detail

void run_launched_rank(const std::string& folder, int rank) {
  using namespace detail;
  const std::string origin = folder + "/job.json";
  const nlohmann::json job = nlohmann::json::parse(read_text(origin));
  const std::string kind = job.at("job").get<std::string>();
  const GlooNetwork loopback{"lo"};
  if (kind == "copies") {
    const DeviceSpec device{job.at("device").at("kind").get<std::string>(), 2};
    const double timeout_s = job.at("timeout_s").get<double>();
    auto store = c10::make_intrusive<c10d::FileStore>(folder + "/store", 2);
    store->setTimeout(milliseconds_of(timeout_s));
    const std::shared_ptr<Channel> world = make_channel(store, rank, 2, device, loopback, timeout_s, rank);
    at::set_num_threads(1);
    const std::vector<CopySample> samples =
        probe_copies(*world, rank, job.at("warmup").get<int>(), job.at("repeats").get<int>(), timeout_s);
    barrier(*world, timeout_s);
    nlohmann::json copies = nlohmann::json::array();
    for (const CopySample& sample : samples) copies.push_back({sample.bytes, sample.seconds});
    write_text(folder + "/part." + std::to_string(rank) + ".json", nlohmann::json{{"copies", copies}}.dump());
    return;
  }
  if (kind != "execute") throw std::logic_error(fmt::format("{}: unknown job '{}'", origin, kind));
  ExecutionRequest request = request_from_json(job.at("request"), origin);
  const int world_size = static_cast<int>(request.program.devices.size());
  if (rank < 0 || rank >= world_size) throw std::logic_error(fmt::format("__rank {}: the job has {} ranks", rank, world_size));
  auto store = c10::make_intrusive<c10d::FileStore>(folder + "/store", world_size);
  store->setTimeout(milliseconds_of(request.launcher.timeout_s));
  const std::shared_ptr<Channel> world =
      make_channel(store, rank, world_size, request.device, loopback, request.launcher.timeout_s, rank);
  const RunPart part = run_rank(request, rank, world, store, "pipegrid/run", loopback);
  write_text(folder + "/part." + std::to_string(rank) + ".json", part_to_json(part).dump());
}

}  // namespace pipegrid::validate
