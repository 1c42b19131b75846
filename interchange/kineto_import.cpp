#include "interchange/kineto_import.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/json_input.hpp"
#include "core/platform_check.hpp"

namespace pipegrid::kineto {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

bool starts_with(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

bool is_gpu_category(const std::string& cat) {
  return cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset" || cat == "gpu_user_annotation";
}
bool is_launch_category(const std::string& cat) { return cat == "cuda_runtime" || cat == "cuda_driver"; }
bool is_cpu_event(const TraceEvent& e) { return !is_gpu_category(e.cat) && !is_launch_category(e.cat) && e.cat != "Trace"; }
bool is_nccl_kernel(const TraceEvent& e) { return e.cat == "kernel" && starts_with(e.name, "nccl"); }
/// CPU ops that move data between ranks (never part of a compute action's time in CPU traces).
bool is_comm_op(const std::string& name) {
  return starts_with(name, "c10d::") || starts_with(name, "nccl:") || starts_with(name, "gloo:") || name == "record_param_comms";
}
bool is_compute_kind(const std::string& kind) { return kind == "F" || kind == "B" || kind == "I" || kind == "W" || kind == "R"; }

double dtype_bytes(const std::string& dtype) {
  if (dtype == "BFloat16" || dtype == "Half" || dtype == "Short") return 2;
  if (dtype == "Float" || dtype == "Int") return 4;
  if (dtype == "Double" || dtype == "Long" || dtype == "ComplexFloat") return 8;
  if (dtype == "Byte" || dtype == "Char" || dtype == "Bool" || starts_with(dtype, "Float8")) return 1;
  return 0;
}

std::string id_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_integer()) return std::to_string(value.get<long long>());
  if (value.is_null()) return "";
  return value.dump();
}

std::string event_label(const std::string& file, const TraceEvent& e) {
  return fmt::format("{}: traceEvents[{}] ('{}')", file, e.index, printable(e.name));
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

/// "[0, 1]" (record_param_comms's "Process Group Ranks") as numbers.
std::vector<int> parse_rank_list(const std::string& text) {
  std::vector<int> ranks;
  int value = 0;
  bool in_number = false;
  for (const char c : text) {
    if (c >= '0' && c <= '9') {
      value = value * 10 + (c - '0');
      in_number = true;
    } else if (in_number) {
      ranks.push_back(value);
      value = 0;
      in_number = false;
    }
  }
  if (in_number) ranks.push_back(value);
  return ranks;
}

RangeRule make_rule(std::string pattern, std::string kind, std::string stage, std::string micro_batch, std::string bytes,
                    const std::string& where, std::array<std::string, 3> second = {}) {
  RangeRule rule;
  rule.pattern = std::move(pattern);
  try {
    rule.regex = std::regex(rule.pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& error) {
    throw InputError(fmt::format("{}: pattern: expected an ECMAScript regular expression, found '{}' ({})", where,
                                 printable(rule.pattern), error.what()));
  }
  rule.kind = std::move(kind);
  rule.stage = std::move(stage);
  rule.micro_batch = std::move(micro_batch);
  rule.bytes = std::move(bytes);
  rule.second_kind = std::move(second[0]);
  rule.second_stage = std::move(second[1]);
  rule.second_micro_batch = std::move(second[2]);
  const bool any = !rule.second_kind.empty() || !rule.second_stage.empty() || !rule.second_micro_batch.empty();
  if (any && (rule.second_kind.empty() || rule.second_stage.empty() || rule.second_micro_batch.empty()))
    throw InputError(fmt::format("{}: second_kind, second_stage and second_micro_batch: expected all three (an overlapped "
                                 "pair's second action) or none, found only some",
                                 where));
  return rule;
}

/// `text` with every "$n" replaced by the n-th group of `match`.
std::string substitute(const std::string& text, const std::smatch& match) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '$' && i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i + 1]))) {
      std::size_t j = i + 1, group = 0;
      while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) group = group * 10 + (text[j++] - '0');
      if (group < match.size()) out += match[group].str();
      i = j - 1;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::optional<long long> parse_integer(const std::string& text) {
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

/// A compute kernel of an overlapped pair's range, kept to split the pair.
struct PairKernel {
  std::string launch_tid;
  double launch_us = 0, start_us = 0, end_us = 0;
};

/// The second action of an overlapped pair's range.
struct SecondAction {
  std::string kind;
  int stage = 0, micro_batch = 0;
};

/// An action or transfer range of one rank: what a mapping rule (or the
/// anonymous-block rule) made of a CPU range.
struct Action {
  const TraceEvent* event = nullptr;  ///< the range (null for an anonymous block)
  std::string tid;
  std::string kind;
  int stage = 0, micro_batch = 0, mini_batch = 0;
  std::optional<double> bytes;
  double cpu_start_us = 0, cpu_end_us = 0;  ///< the CPU range (or block)
  double start_us = 0, end_us = 0;          ///< its time in the timeline (set last)
  double gpu_start_us = kInfinity, gpu_end_us = -kInfinity;
  std::optional<SecondAction> second;  ///< an overlapped pair's range, until split
  std::vector<PairKernel> pair_kernels;
  int pair_position = -1;  ///< 0 or 1: this action ran first or second in an overlapped pair's range
  bool unsplit = false;    ///< a pair whose kernels could not be told apart: both hold the whole range
  bool contains(double t) const { return cpu_start_us <= t && t <= cpu_end_us; }
};

struct Step {
  int number = 0;
  double start_us = 0, end_us = 0;
};

/// A rank's trace read for the import.
struct RankView {
  const RankTrace* trace = nullptr;
  int rank = 0;
  std::vector<const TraceEvent*> cpu;            ///< CPU events, file order
  std::map<const TraceEvent*, const TraceEvent*> parent;  ///< the innermost CPU event enclosing it on its thread
  std::map<long long, const TraceEvent*> launch_of;        ///< correlation -> launch
  std::vector<const TraceEvent*> kernels;
  std::vector<Step> steps;
  std::vector<Action> actions;    ///< compute
  std::vector<Action> transfers;  ///< SEND_ and RECV_ ranges
  bool anonymous = false;
};

void compute_parents(RankView& view) {
  std::map<std::string, std::vector<const TraceEvent*>> by_thread;
  for (const TraceEvent* e : view.cpu) by_thread[e->tid].push_back(e);
  for (auto& [tid, events] : by_thread) {
    std::stable_sort(events.begin(), events.end(), [](const TraceEvent* a, const TraceEvent* b) {
      return a->ts_us != b->ts_us ? a->ts_us < b->ts_us : a->dur_us > b->dur_us;
    });
    std::vector<const TraceEvent*> open;
    for (const TraceEvent* e : events) {
      while (!open.empty() && !(open.back()->ts_us <= e->ts_us && e->ts_us + e->dur_us <= open.back()->ts_us + open.back()->dur_us))
        open.pop_back();
      view.parent[e] = open.empty() ? nullptr : open.back();
      open.push_back(e);
    }
  }
}

int step_index(const std::vector<Step>& steps, double t) {
  for (std::size_t i = 0; i < steps.size(); ++i)
    if (steps[i].start_us <= t && t <= steps[i].end_us) return static_cast<int>(i);
  return -1;
}

/// Applies the mapping to one range: an action, or nothing when no rule matches.
std::optional<Action> map_range(const TraceEvent& e, const RangeMapping& mapping, int rank, const std::string& file) {
  for (std::size_t r = 0; r < mapping.rules.size(); ++r) {
    const RangeRule& rule = mapping.rules[r];
    std::smatch match;
    if (!std::regex_match(e.name, match, rule.regex)) continue;
    Action action;
    action.event = &e;
    action.tid = e.tid;
    action.cpu_start_us = action.start_us = e.ts_us;
    action.cpu_end_us = action.end_us = e.ts_us + e.dur_us;
    action.kind = substitute(rule.kind, match);
    const std::string where = fmt::format("{} matched by rule {} of the {} ('{}')", event_label(file, e), r,
                                          mapping.origin, printable(rule.pattern));
    const bool transfer = action.kind == "SEND_F" || action.kind == "SEND_B" || action.kind == "RECV_F" || action.kind == "RECV_B";
    if (!is_compute_kind(action.kind) && !transfer)
      throw InputError(fmt::format("{}: kind: expected F, B, I, W, R, SEND_F, SEND_B, RECV_F or RECV_B, found '{}'", where,
                                   printable(action.kind)));
    auto number = [&](const std::string& field, const std::string& spec) {
      const std::string text = substitute(spec, match);
      const auto value = parse_integer(text);
      if (!value || *value < 0 || *value > 1000000)
        throw InputError(fmt::format("{}: {}: expected an integer in 0..1000000, found '{}'", where, field, printable(text)));
      return static_cast<int>(*value);
    };
    action.stage = rule.stage.empty() ? rank : number("stage", rule.stage);
    action.micro_batch = number("micro_batch", rule.micro_batch);
    if (!rule.second_kind.empty()) {
      SecondAction second{substitute(rule.second_kind, match), number("second_stage", rule.second_stage),
                          number("second_micro_batch", rule.second_micro_batch)};
      const bool forward_first = action.kind == "F" && (second.kind == "B" || second.kind == "I");
      const bool backward_first = second.kind == "F" && (action.kind == "B" || action.kind == "I");
      if (!forward_first && !backward_first)
        throw InputError(fmt::format("{}: kind and second_kind: expected an overlapped pair of one F and one B or I, found "
                                     "'{}' and '{}'",
                                     where, printable(action.kind), printable(second.kind)));
      action.second = second;
    }
    if (!rule.bytes.empty()) {
      const std::string text = substitute(rule.bytes, match);
      if (!text.empty()) action.bytes = number("bytes", rule.bytes);
    }
    return action;
  }
  return std::nullopt;
}

/// The anonymous-block rule (docs/kineto.md): the main thread's top-level
/// compute ops between communication ops are one forward; a burst of the
/// autograd engine's evaluate_function ops on another thread is one
/// backward; micro-batches count in order within each step.
void anonymous_blocks(RankView& view, const std::string& main_tid) {
  struct Item {
    const TraceEvent* e;
    int kind;  ///< 0 comm, 1 forward, 2 backward
  };
  std::vector<Item> items;
  for (const TraceEvent* e : view.cpu) {
    const TraceEvent* parent = view.parent.at(e);
    const bool top = parent == nullptr || starts_with(parent->name, "ProfilerStep#");
    if (!top || starts_with(e->name, "ProfilerStep#")) continue;
    if (is_comm_op(e->name)) {
      if (e->tid == main_tid) items.push_back({e, 0});
    } else if (e->tid == main_tid) {
      items.push_back({e, 1});
    } else if (starts_with(e->name, "autograd::engine::evaluate_function")) {
      items.push_back({e, 2});
    }
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.e->ts_us < b.e->ts_us; });
  std::optional<Action> open;
  int open_kind = 0;
  auto close = [&] {
    if (!open) return;
    const int step = view.steps.empty() ? 0 : step_index(view.steps, open->start_us);
    if (step >= 0 || view.steps.empty()) {
      open->mini_batch = std::max(step, 0);
      open->cpu_start_us = open->start_us;
      open->cpu_end_us = open->end_us;
      view.actions.push_back(*open);
    }
    open.reset();
  };
  for (const Item& item : items) {
    const bool new_step = open && !view.steps.empty() &&
                          step_index(view.steps, item.e->ts_us) != step_index(view.steps, open->start_us);
    if (item.kind == 0 || new_step || (open && open_kind != item.kind)) close();
    if (item.kind == 0) continue;
    if (!open) {
      open = Action{};
      open->tid = item.e->tid;
      open->kind = item.kind == 1 ? "F" : "B";
      open->stage = view.rank;
      open->start_us = item.e->ts_us;
      open_kind = item.kind;
    }
    open->end_us = std::max(open->end_us, item.e->ts_us + item.e->dur_us);
  }
  close();
}

/// The innermost action of `actions` holding time `t`: on thread `tid` first, else on any thread.
template <typename Filter>
Action* owner(std::vector<Action>& actions, const std::string& tid, double t, Filter filter) {
  for (const bool same_thread : {true, false}) {
    Action* best = nullptr;
    for (Action& a : actions)
      if (filter(a) && (!same_thread || a.tid == tid) && a.contains(t) &&
          (best == nullptr || a.end_us - a.start_us < best->end_us - best->start_us))
        best = &a;
    if (best != nullptr || !same_thread) return best;
  }
  return nullptr;
}

/// Splits each overlapped pair's range into its two actions (docs/kineto.md):
/// the backward's kernels are those other threads (the autograd engine's)
/// launched, and those the range's own thread launched between their first
/// and last launch; the forward's, the range's thread's launched before them
/// (forward first) or after them (backward first). A pair without a kernel
/// launched on another thread (CPU traces, a backward on the range's
/// thread) cannot be told apart: both actions keep the whole range, marked
/// unsplit. The two actions take the range's place, first then second.
void split_pairs(RankView& view, std::vector<std::string>& notes) {
  std::vector<Action> actions;
  std::size_t unsplit = 0;
  for (Action& pair : view.actions) {
    if (!pair.second) {
      actions.push_back(std::move(pair));
      continue;
    }
    Action first = pair, second = pair;
    first.second.reset();
    second.second.reset();
    first.pair_kernels.clear();
    second.pair_kernels.clear();
    second.kind = pair.second->kind;
    second.stage = pair.second->stage;
    second.micro_batch = pair.second->micro_batch;
    first.pair_position = 0;
    second.pair_position = 1;
    double other_first = kInfinity, other_last = -kInfinity;
    for (const PairKernel& k : pair.pair_kernels)
      if (k.launch_tid != pair.tid) {
        other_first = std::min(other_first, k.launch_us);
        other_last = std::max(other_last, k.launch_us);
      }
    if (other_first <= other_last) {
      const bool forward_first = first.kind == "F";
      Action& forward = forward_first ? first : second;
      Action& backward = forward_first ? second : first;
      for (Action* part : {&forward, &backward}) {
        part->gpu_start_us = kInfinity;
        part->gpu_end_us = -kInfinity;
      }
      for (const PairKernel& k : pair.pair_kernels) {
        const bool of_forward =
            k.launch_tid == pair.tid && (forward_first ? k.launch_us < other_first : k.launch_us > other_last);
        Action& part = of_forward ? forward : backward;
        part.gpu_start_us = std::min(part.gpu_start_us, k.start_us);
        part.gpu_end_us = std::max(part.gpu_end_us, k.end_us);
      }
    } else {
      first.unsplit = second.unsplit = true;
      ++unsplit;
    }
    actions.push_back(std::move(first));
    actions.push_back(std::move(second));
  }
  view.actions = std::move(actions);
  if (unsplit > 0)
    notes.push_back(fmt::format("{}: {} overlapped pairs launched no kernel on another thread: both actions of each hold the "
                                "whole range, left out of the profile's medians",
                                view.trace->file, unsplit));
}

ActionKind program_kind(const std::string& kind) {
  if (kind == "F") return ActionKind::Forward;
  if (kind == "B") return ActionKind::Backward;
  if (kind == "I") return ActionKind::BackwardInput;
  if (kind == "W") return ActionKind::BackwardWeight;
  return ActionKind::Recompute;  // "R": the only other compute kind (is_compute_kind)
}

/// The Program that ran (ImportResult::program).
Program program_that_ran(const std::vector<RankView>& views, int stages, int micro_batches) {
  Program program;
  program.num_stages = stages;
  program.micro_batches = micro_batches;
  int mini_batches = 0;
  for (const RankView& view : views) {
    std::vector<const Action*> order;
    std::set<int> held;
    for (const Action& a : view.actions) {
      order.push_back(&a);
      held.insert(a.stage);
      mini_batches = std::max(mini_batches, a.mini_batch + 1);
    }
    std::stable_sort(order.begin(), order.end(), [](const Action* a, const Action* b) {
      return std::tie(a->mini_batch, a->cpu_start_us, a->pair_position) < std::tie(b->mini_batch, b->cpu_start_us, b->pair_position);
    });
    DeviceProgram device;
    device.stages.assign(held.begin(), held.end());
    Stream stream;
    for (const Action* a : order) {
      if (a->pair_position == 1 && !stream.actions.empty()) stream.overlapped.push_back(stream.actions.size() - 1);
      stream.actions.push_back({program_kind(a->kind), a->stage, a->micro_batch, a->mini_batch});
    }
    device.streams.push_back(std::move(stream));
    program.devices.push_back(std::move(device));
  }
  program.mini_batches = std::max(mini_batches, 1);
  return program;
}

struct P2p {
  const RankView* view = nullptr;
  const TraceEvent* op = nullptr;
  int peer = 0;
  double bytes = 0;
  double start_us = 0, end_us = 0;  ///< the NCCL kernel's (GPU) or the op's (CPU)
};

std::string rule_json_field(const nlohmann::json& rule, const char* field, const std::string& where, bool required) {
  if (!rule.contains(field)) {
    if (required) throw InputError(fmt::format("{}: expected the field \"{}\"", where, field));
    return "";
  }
  const nlohmann::json& value = rule.at(field);
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_integer() && value.get<long long>() >= 0) return std::to_string(value.get<long long>());
  throw InputError(fmt::format("{}: {}: expected a string or a non-negative integer, found {}", where, field, shown_json(value)));
}

std::string platform_xml(const ImportResult& result, int ranks, const std::string& description) {
  const double bandwidth = result.bandwidth_Bps > 0 && std::isfinite(result.bandwidth_Bps) ? result.bandwidth_Bps : 1e15;
  const auto host = [&](int r) { return fmt::format("{}{}", result.gpu ? "gpu" : "cpu", r); };
  std::string xml = "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n<!--\n";
  xml += fmt::format("  Written by pipegrid trace import from {}.\n", description);
  xml += fmt::format(
      "  One host per rank ({}), each running one action at a time (kind gpu) in the profile's\n"
      "  measured stage times (speed_factor 1, no per-action overhead). A copy between two ranks:\n"
      "  latency {:.6g} s + bytes / {:.6g} B/s, fitted from the measured p2p transfers\n"
      "  (docs/kineto.md). One link per pair of hosts.\n",
      result.gpu ? "GPU streams timed by the profiler's kernels" : "CPU ranges", result.latency_s, bandwidth);
  if (result.allreduce_bus_bandwidth_Bps)
    xml += fmt::format("  All-reduces in the traces: median bus bandwidth {:.6g} B/s (2(n-1)/n x bytes / kernel time).\n",
                       *result.allreduce_bus_bandwidth_Bps);
  xml += "-->\n<platform version=\"4.1\">\n  <zone id=\"kineto-import\" routing=\"Full\">\n";
  for (int r = 0; r < ranks; ++r)
    xml += fmt::format("    <host id=\"{}\" speed=\"1Gf\">\n      <prop id=\"kind\" value=\"gpu\"/>\n    </host>\n", host(r));
  for (int a = 0; a < ranks; ++a)
    for (int b = a + 1; b < ranks; ++b)
      xml += fmt::format("    <link id=\"p2p{}-{}\" bandwidth=\"{:.9g}Bps\" latency=\"{:.9g}s\"/>\n", a, b, bandwidth,
                         result.latency_s);
  for (int a = 0; a < ranks; ++a)
    for (int b = a + 1; b < ranks; ++b)
      xml += fmt::format("    <route src=\"{}\" dst=\"{}\"><link_ctn id=\"p2p{}-{}\"/></route>\n", host(a), host(b), a, b);
  xml += "  </zone>\n</platform>\n";
  return xml;
}

}  // namespace

RangeMapping default_mapping() {
  RangeMapping mapping;
  mapping.origin = "default mapping";
  const std::string where = "default mapping";
  // torch.distributed.pipelining (PyTorch 2.11), schedules.py: ScheduleGPipe's
  // record_function(f"Forward {i}") / (f"Backward {i}"); the runtime
  // schedules' f"PP:{action}" with _Action's text "<stage><F|B|I|W><mb>",
  // "<stage>SEND_F<mb>", "<stage>RECV_B<mb>", ...
  mapping.rules.push_back(make_rule("Forward (\\d+)", "F", "", "$1", "", where));
  mapping.rules.push_back(make_rule("Backward (\\d+)", "B", "", "$1", "", where));
  mapping.rules.push_back(make_rule("PP:(\\d+)([FBIW])(\\d+)", "$2", "$1", "$3", "", where));
  // DualPipeV's overlapped pairs, f"PP:{action}" of _Action's OVERLAP_F_B text "(<F action>;<B action>)OVERLAP_F_B".
  mapping.rules.push_back(make_rule("PP:\\((\\d+)([FBI])(\\d+);(\\d+)([FBI])(\\d+)\\)OVERLAP_F_B", "$2", "$1", "$3", "", where,
                                    {"$5", "$4", "$6"}));
  // A SEND range may state its size as " bytes=N" (pipegrid's, for traces without record_param_comms).
  mapping.rules.push_back(make_rule("PP:(\\d+)SEND_([FB])(\\d+)(?: bytes=(\\d+))?", "SEND_$2", "$1", "$3", "$4", where));
  mapping.rules.push_back(make_rule("PP:(\\d+)RECV_([FB])(\\d+)", "RECV_$2", "$1", "$3", "", where));
  return mapping;
}

RangeMapping parse_mapping_json(const std::string& text, const std::string& origin) {
  const nlohmann::json document = parse_json_input(text, origin);
  if (!document.is_object()) throw InputError(fmt::format("{}: expected a JSON object with \"rules\", found {}", origin, shown_json(document)));
  reject_unknown_json_fields(document, origin, {"rules"});
  if (!document.contains("rules") || !document.at("rules").is_array() || document.at("rules").empty())
    throw InputError(fmt::format("{}: rules: expected a non-empty array of rules", origin));
  RangeMapping mapping;
  mapping.origin = origin;
  std::size_t index = 0;
  for (const nlohmann::json& rule : document.at("rules")) {
    const std::string where = fmt::format("{}: rules[{}]", origin, index++);
    if (!rule.is_object()) throw InputError(fmt::format("{}: expected an object, found {}", where, shown_json(rule)));
    reject_unknown_json_fields(rule, where,
                               {"pattern", "kind", "stage", "micro_batch", "bytes", "second_kind", "second_stage", "second_micro_batch"});
    if (!rule.contains("pattern") || !rule.at("pattern").is_string())
      throw InputError(fmt::format("{}: pattern: expected a string (a regular expression)", where));
    mapping.rules.push_back(make_rule(rule.at("pattern").get<std::string>(), rule_json_field(rule, "kind", where, true),
                                      rule_json_field(rule, "stage", where, false),
                                      rule_json_field(rule, "micro_batch", where, true),
                                      rule_json_field(rule, "bytes", where, false), where,
                                      {rule_json_field(rule, "second_kind", where, false),
                                       rule_json_field(rule, "second_stage", where, false),
                                       rule_json_field(rule, "second_micro_batch", where, false)}));
  }
  return mapping;
}

RankTrace parse_kineto_trace(const std::string& text, const std::string& file) {
  const nlohmann::json document = parse_json_input(text, file);
  RankTrace trace;
  trace.file = file;
  const nlohmann::json* events = nullptr;
  if (document.is_array()) {
    events = &document;
  } else if (document.is_object() && document.contains("traceEvents") && document.at("traceEvents").is_array()) {
    events = &document.at("traceEvents");
    if (document.contains("distributedInfo") && document.at("distributedInfo").is_object()) {
      const nlohmann::json& info = document.at("distributedInfo");
      if (info.contains("rank")) {
        const auto rank = json_integer_in(info.at("rank"), 0, 1 << 20);
        if (!rank) throw InputError(fmt::format("{}: distributedInfo.rank: expected an integer in 0..{}, found {}", file, 1 << 20, shown_json(info.at("rank"))));
        trace.rank = static_cast<int>(*rank);
      }
      if (info.contains("world_size")) {
        const auto size = json_integer_in(info.at("world_size"), 1, 1 << 20);
        if (!size) throw InputError(fmt::format("{}: distributedInfo.world_size: expected an integer in 1..{}, found {}", file, 1 << 20, shown_json(info.at("world_size"))));
        trace.world_size = static_cast<int>(*size);
      }
    }
  } else {
    throw InputError(fmt::format("{}: expected a Chrome trace: an object with a \"traceEvents\" array (PyTorch profiler), or "
                                 "an array of events; found no traceEvents",
                                 file));
  }
  std::size_t index = 0;
  for (const nlohmann::json& event : *events) {
    const std::size_t at = index++;
    if (!event.is_object() || !event.contains("ph") || event.at("ph") != "X") continue;
    TraceEvent e;
    e.index = at;
    e.name = event.contains("name") && event.at("name").is_string() ? event.at("name").get<std::string>() : "";
    const std::string label = fmt::format("{}: traceEvents[{}] ('{}')", file, at, printable(e.name));
    e.cat = event.contains("cat") && event.at("cat").is_string() ? event.at("cat").get<std::string>() : "";
    e.pid = event.contains("pid") ? id_text(event.at("pid")) : "";
    e.tid = event.contains("tid") ? id_text(event.at("tid")) : "";
    for (const char* field : {"ts", "dur"}) {
      if (!event.contains(field))
        throw InputError(fmt::format("{}: a complete (\"X\") event without \"{}\"", label, field));
      const auto value = json_number_in(event.at(field), field[0] == 'd' ? 0.0 : -1e18, 1e18);
      if (!value)
        throw InputError(fmt::format("{}: {}: expected a {}number of microseconds, found {}", label, field,
                                     field[0] == 'd' ? "non-negative " : "", shown_json(event.at(field))));
      (field[0] == 't' ? e.ts_us : e.dur_us) = *value;
    }
    if (event.contains("args") && event.at("args").is_object()) {
      const nlohmann::json& args = event.at("args");
      if (args.contains("correlation") && args.at("correlation").is_number_integer())
        e.correlation = args.at("correlation").get<long long>();
      if (e.name == "record_param_comms") {
        auto text_arg = [&](const char* key) {
          return args.contains(key) && args.at(key).is_string() ? args.at(key).get<std::string>() : std::string();
        };
        auto number_arg = [&](const char* key) {
          return args.contains(key) && args.at(key).is_number() ? args.at(key).get<double>() : 0.0;
        };
        e.collective = text_arg("Collective name");
        e.dtype = text_arg("dtype");
        e.in_elements = number_arg("In msg nelems");
        e.out_elements = number_arg("Out msg nelems");
        // A peer rank outside int's range is refused, never truncated.
        auto rank_arg = [&](const char* key) -> std::optional<int> {
          if (!args.contains(key) || !args.at(key).is_number_integer()) return std::nullopt;
          const long long value = args.at(key).is_number_unsigned() && args.at(key).get<unsigned long long>() > 0x7fffffffULL
                                      ? -1
                                      : args.at(key).get<long long>();
          if (value < 0 || value > 0x7fffffffLL)
            throw InputError(fmt::format("{}: \"{}\": expected a rank from 0, found {}", event_label(file, e), key, shown_json(args.at(key))));
          return static_cast<int>(value);
        };
        if (const std::optional<int> rank = rank_arg("Dst Rank")) e.dst_rank = *rank;
        if (const std::optional<int> rank = rank_arg("Src Rank")) e.src_rank = *rank;
        e.group_ranks = parse_rank_list(text_arg("Process Group Ranks"));
      }
    }
    trace.events.push_back(std::move(e));
  }
  return trace;
}

ImportResult import_traces(const std::vector<RankTrace>& traces, const ImportOptions& options) {
  if (traces.empty()) throw InputError("trace import: expected one trace file per rank, found none");
  ImportResult result;
  const int ranks = static_cast<int>(traces.size());
  // Ranks: distributedInfo's, else the position on the command line.
  std::vector<RankView> views(ranks);
  std::vector<const RankTrace*> by_rank(ranks, nullptr);
  for (int i = 0; i < ranks; ++i) {
    const RankTrace& trace = traces[i];
    const int rank = trace.rank.value_or(i);
    if (trace.world_size && *trace.world_size != ranks)
      throw InputError(fmt::format("{}: distributedInfo.world_size is {}, {} trace files given (one per rank)", trace.file,
                                   *trace.world_size, ranks));
    if (rank >= ranks)
      throw InputError(fmt::format("{}: rank {}, expected 0..{} (one trace file per rank; rank {} is missing)", trace.file, rank,
                                   ranks - 1, [&] {
                                     for (int r = 0; r < ranks; ++r) {
                                       bool seen = false;
                                       for (int j = 0; j < ranks; ++j) seen = seen || traces[j].rank.value_or(j) == r;
                                       if (!seen) return r;
                                     }
                                     return 0;
                                   }()));
    if (by_rank[rank] != nullptr)
      throw InputError(fmt::format("{}: rank {} again ({} is rank {} too)", trace.file, rank, by_rank[rank]->file, rank));
    by_rank[rank] = &trace;
  }
  bool any_kernel = false;
  for (int r = 0; r < ranks; ++r)
    for (const TraceEvent& e : by_rank[r]->events) any_kernel = any_kernel || e.cat == "kernel";
  result.gpu = any_kernel;

  // Steps: ProfilerStep#N ranges, numbered from the least N of all ranks.
  static const std::regex step_name("ProfilerStep#(\\d+)");
  int first_step = std::numeric_limits<int>::max();
  for (int r = 0; r < ranks; ++r) {
    RankView& view = views[r];
    view.trace = by_rank[r];
    view.rank = r;
    for (const TraceEvent& e : view.trace->events) {
      if (is_launch_category(e.cat) && e.correlation) view.launch_of[*e.correlation] = &e;
      if (e.cat == "kernel") view.kernels.push_back(&e);
      if (!is_cpu_event(e)) continue;
      view.cpu.push_back(&e);
      std::smatch match;
      if (std::regex_match(e.name, match, step_name)) {
        const int number = static_cast<int>(parse_integer(match[1].str()).value_or(0));
        view.steps.push_back({number, e.ts_us, e.ts_us + e.dur_us});
        first_step = std::min(first_step, number);
      }
    }
    std::sort(view.steps.begin(), view.steps.end(), [](const Step& a, const Step& b) { return a.start_us < b.start_us; });
    compute_parents(view);
  }

  std::size_t dropped_outside_steps = 0;
  for (RankView& view : views) {
    const std::string& file = view.trace->file;
    for (const TraceEvent* e : view.cpu) {
      std::optional<Action> action = map_range(*e, options.mapping, view.rank, file);
      if (!action) continue;
      if (!view.steps.empty()) {
        const int step = step_index(view.steps, action->start_us);
        if (step < 0) {
          ++dropped_outside_steps;
          continue;
        }
        action->mini_batch = view.steps[step].number - first_step;
      }
      (is_compute_kind(action->kind) ? view.actions : view.transfers).push_back(*action);
    }
    if (view.actions.empty()) {
      // No range is an action: the anonymous-block rule, on the steps' thread.
      std::map<std::string, std::size_t> per_thread;
      std::string main_tid;
      for (const TraceEvent* e : view.cpu) {
        if (starts_with(e->name, "ProfilerStep#")) main_tid = e->tid;
        ++per_thread[e->tid];
      }
      if (main_tid.empty())
        for (const auto& [tid, count] : per_thread)
          if (main_tid.empty() || count > per_thread[main_tid]) main_tid = tid;
      anonymous_blocks(view, main_tid);
      for (Action& a : view.actions)
        if (!view.steps.empty()) a.mini_batch = view.steps[a.mini_batch].number - first_step;
      view.anonymous = true;
      result.notes.push_back(fmt::format("{}: no range matched the {}; {} actions taken from anonymous blocks (main thread "
                                         "{}: forwards; autograd threads: backwards; docs/kineto.md)",
                                         file, options.mapping.origin, view.actions.size(), printable(main_tid)));
    }
    if (view.actions.empty())
      throw InputError(fmt::format("{}: no action found: no range matched the {} and no forward or backward op was recorded",
                                   file, options.mapping.origin));
    // Kernels: each compute kernel to the action its launch lies in.
    std::size_t unowned = 0;
    for (const TraceEvent* kernel : view.kernels) {
      if (is_nccl_kernel(*kernel) || !kernel->correlation) continue;
      const auto launch = view.launch_of.find(*kernel->correlation);
      if (launch == view.launch_of.end()) {
        ++unowned;
        continue;
      }
      Action* action = owner(view.actions, launch->second->tid, launch->second->ts_us, [](const Action&) { return true; });
      if (action == nullptr) {
        ++unowned;
        continue;
      }
      action->gpu_start_us = std::min(action->gpu_start_us, kernel->ts_us);
      action->gpu_end_us = std::max(action->gpu_end_us, kernel->ts_us + kernel->dur_us);
      if (action->second)
        action->pair_kernels.push_back({launch->second->tid, launch->second->ts_us, kernel->ts_us, kernel->ts_us + kernel->dur_us});
    }
    split_pairs(view, result.notes);
    if (view.anonymous) {
      // GPU traces: a block that launched no compute kernel is no action
      // (the inputs' tensor_split, a detach_ after a backward). Micro-batches
      // count the blocks left in order within each step.
      if (result.gpu)
        std::erase_if(view.actions, [](const Action& a) { return a.gpu_end_us < a.gpu_start_us; });
      // Main-thread work after a step's last backward is its optimizer step, not a forward.
      std::map<int, double> last_backward;
      for (const Action& a : view.actions)
        if (a.kind == "B") last_backward[a.mini_batch] = std::max(last_backward[a.mini_batch], a.cpu_start_us);
      std::erase_if(view.actions, [&](const Action& a) {
        return a.kind == "F" && last_backward.contains(a.mini_batch) && a.cpu_start_us > last_backward[a.mini_batch];
      });
      std::map<std::pair<int, std::string>, int> counts;
      for (Action& a : view.actions) a.micro_batch = counts[{a.mini_batch, a.kind}]++;
    }
    if (unowned > 0)
      result.notes.push_back(fmt::format("{}: {} compute kernels launched outside every action (optimizer, loss set-up, "
                                         "profiler steps' edges): not in the timeline",
                                         file, unowned));
  }
  if (dropped_outside_steps > 0)
    result.notes.push_back(fmt::format("{} mapped ranges outside every ProfilerStep: left out", dropped_outside_steps));

  // Action times: GPU traces the span of their kernels; CPU traces the range
  // less the communication it begins or ends with.
  std::size_t without_kernels = 0;
  for (RankView& view : views) {
    std::map<const TraceEvent*, std::vector<const TraceEvent*>> children;
    for (const auto& [e, parent] : view.parent)
      if (parent != nullptr) children[parent].push_back(e);
    for (Action& a : view.actions) {
      if (result.gpu) {
        if (a.gpu_end_us >= a.gpu_start_us) {
          a.start_us = a.gpu_start_us;
          a.end_us = a.gpu_end_us;
        } else {
          ++without_kernels;
        }
        continue;
      }
      if (a.event == nullptr) continue;
      double first = kInfinity, last = -kInfinity;
      for (const TraceEvent* child : children[a.event]) {
        if (is_comm_op(child->name) || map_range(*child, options.mapping, view.rank, view.trace->file)) continue;
        first = std::min(first, child->ts_us);
        last = std::max(last, child->ts_us + child->dur_us);
      }
      if (last >= first) {
        a.start_us = first;
        a.end_us = last;
      }
    }
  }
  if (without_kernels > 0)
    result.notes.push_back(fmt::format("{} actions launched no kernel: their CPU range is their time", without_kernels));

  // Stages: which rank runs each.
  std::map<int, int> rank_of_stage;
  for (const RankView& view : views)
    for (const Action& a : view.actions) {
      const auto [it, added] = rank_of_stage.try_emplace(a.stage, view.rank);
      if (!added && it->second != view.rank)
        throw InputError(fmt::format("{}: stage {} runs on rank {} and on rank {}; expected each stage on one rank",
                                     view.trace->file, a.stage, it->second, view.rank));
    }
  result.stages = rank_of_stage.rbegin()->first + 1;
  for (int s = 0; s < result.stages; ++s)
    if (!rank_of_stage.contains(s))
      throw InputError(fmt::format("stage {}: no action of it in any trace (stages found: {}); expected stages 0..{}", s,
                                   [&] {
                                     std::string list;
                                     for (const auto& [stage, rank] : rank_of_stage) list += (list.empty() ? "" : ", ") + std::to_string(stage);
                                     return list;
                                   }(),
                                   result.stages - 1));

  // Point-to-point transfers: record_param_comms send/recv, paired in order per (sender, receiver).
  std::map<std::pair<int, int>, std::vector<P2p>> sends, receives;
  for (const RankView& view : views) {
    // NCCL kernels by their launch's thread and time.
    std::vector<std::pair<const TraceEvent*, const TraceEvent*>> nccl;  // (launch, kernel)
    for (const TraceEvent* kernel : view.kernels)
      if (is_nccl_kernel(*kernel) && kernel->correlation)
        if (const auto launch = view.launch_of.find(*kernel->correlation); launch != view.launch_of.end())
          nccl.emplace_back(launch->second, kernel);
    std::sort(nccl.begin(), nccl.end(), [](const auto& a, const auto& b) { return a.first->ts_us < b.first->ts_us; });
    for (const TraceEvent* e : view.cpu) {
      if (e->name != "record_param_comms" || (e->collective != "send" && e->collective != "recv")) continue;
      const bool send = e->collective == "send";
      const std::optional<int> group_peer = send ? e->dst_rank : e->src_rank;
      if (!group_peer)
        throw InputError(fmt::format("{}: a {} without \"{}\" in args", event_label(view.trace->file, *e), e->collective,
                                     send ? "Dst Rank" : "Src Rank"));
      const int peer = !e->group_ranks.empty() && *group_peer < static_cast<int>(e->group_ranks.size())
                           ? e->group_ranks[*group_peer]
                           : *group_peer;
      if (peer < 0 || peer >= ranks || peer == view.rank)
        throw InputError(fmt::format("{}: {} peer rank {}, expected another of ranks 0..{}", event_label(view.trace->file, *e),
                                     e->collective, peer, ranks - 1));
      P2p p2p;
      p2p.view = &view;
      p2p.op = e;
      p2p.peer = peer;
      p2p.bytes = (send ? e->in_elements : e->out_elements) * dtype_bytes(e->dtype);
      p2p.start_us = e->ts_us;
      p2p.end_us = e->ts_us + e->dur_us;
      if (result.gpu) {
        const auto kernel = std::find_if(nccl.begin(), nccl.end(), [&](const auto& item) {
          return item.first->tid == e->tid && item.first->ts_us >= e->ts_us;
        });
        if (kernel != nccl.end()) {
          p2p.start_us = kernel->second->ts_us;
          p2p.end_us = kernel->second->ts_us + kernel->second->dur_us;
        }
      }
      (send ? sends[{view.rank, peer}] : receives[{peer, view.rank}]).push_back(p2p);
    }
  }
  std::vector<TimelineRecord> records;
  const std::string host_prefix = result.gpu ? "gpu" : "cpu";
  std::map<double, std::vector<double>> copy_times;  // bytes -> seconds
  std::vector<std::pair<std::pair<int, int>, std::size_t>> unmatched;
  std::set<std::pair<int, int>> pairs;
  for (const auto& [pair, list] : sends) pairs.insert(pair);
  for (const auto& [pair, list] : receives) pairs.insert(pair);
  for (const auto& pair : pairs) {
    const std::vector<P2p>& out = sends[pair];
    const std::vector<P2p>& in = receives[pair];
    if (out.size() != in.size()) {
      const bool more_sends = out.size() > in.size();
      const P2p& first = more_sends ? out[in.size()] : in[out.size()];
      throw InputError(fmt::format("{}: {} rank {} has no matching {} in {} (rank {} sends {} to rank {}, rank {} receives "
                                   "{} from rank {})",
                                   event_label(first.view->trace->file, *first.op), more_sends ? "send to" : "recv from",
                                   more_sends ? pair.second : pair.first, more_sends ? "recv" : "send",
                                   by_rank[more_sends ? pair.second : pair.first]->file, pair.first, out.size(), pair.second,
                                   pair.second, in.size(), pair.first));
    }
    for (std::size_t i = 0; i < out.size(); ++i) {
      const P2p& s = out[i];
      const P2p& r = in[i];
      RankView& view = views[pair.first];
      // Which action's message: the SEND range around it, else the action it
      // lies in, else the last action that ended before it.
      std::string kind;
      int stage = 0, micro = 0, mini = 0;
      if (const Action* range = owner(view.transfers, s.op->tid, s.op->ts_us, [](const Action& a) { return starts_with(a.kind, "SEND_"); })) {
        kind = range->kind;
        stage = range->stage;
        micro = range->micro_batch;
        mini = range->mini_batch;
      } else {
        const Action* action = nullptr;
        for (const Action& a : view.actions)
          if (a.event != nullptr && a.tid == s.op->tid && a.contains(s.op->ts_us)) action = &a;
        if (action == nullptr)
          for (const Action& a : view.actions)
            if (a.cpu_end_us <= s.op->ts_us && (action == nullptr || a.cpu_end_us > action->cpu_end_us)) action = &a;
        if (action == nullptr) {
          result.notes.push_back(fmt::format("{}: a send before any action: left out", event_label(view.trace->file, *s.op)));
          continue;
        }
        kind = action->kind == "F" || action->kind == "R" ? "SEND_F" : "SEND_B";
        stage = action->stage;
        micro = action->micro_batch;
        mini = action->mini_batch;
      }
      const double start = std::max(s.start_us, r.start_us), end = std::min(s.end_us, r.end_us);
      TimelineRecord record;
      record.host = host_prefix + std::to_string(pair.first);
      record.stage = stage;
      record.action = kind;
      record.micro_batch = micro;
      record.mini_batch = mini;
      record.start_s = end > start ? start : s.start_us;
      record.end_s = end > start ? end : s.end_us;
      record.bytes = s.bytes;
      record.peer = host_prefix + std::to_string(pair.second);
      if (s.bytes > 0) copy_times[s.bytes].push_back((record.end_s - record.start_s) * 1e-6);
      records.push_back(record);
    }
  }
  // SEND ranges without record_param_comms (Gloo under the legacy profiler): the range is the transfer.
  for (const RankView& view : views)
    for (const Action& t : view.transfers) {
      if (!starts_with(t.kind, "SEND_")) continue;
      bool has_op = false;
      for (const auto& [pair, list] : sends)
        for (const P2p& p : list)
          has_op = has_op || (p.view == &view && p.op->tid == t.tid && t.contains(p.op->ts_us));
      if (has_op) continue;
      const int peer_stage = t.kind == "SEND_F" ? t.stage + 1 : t.stage - 1;
      const auto peer = rank_of_stage.find(peer_stage);
      if (peer == rank_of_stage.end())
        throw InputError(fmt::format("{}: {} of stage {}: no rank runs stage {}", event_label(view.trace->file, *t.event), t.kind,
                                     t.stage, peer_stage));
      TimelineRecord record;
      record.host = host_prefix + std::to_string(view.rank);
      record.stage = t.stage;
      record.action = t.kind;
      record.micro_batch = t.micro_batch;
      record.mini_batch = t.mini_batch;
      record.start_s = t.start_us;
      record.end_s = t.end_us;
      record.bytes = t.bytes.value_or(0);
      record.peer = host_prefix + std::to_string(peer->second);
      if (record.bytes > 0) copy_times[record.bytes].push_back((t.end_us - t.start_us) * 1e-6);
      records.push_back(record);
    }

  // All-reduces (data parallelism): their bus bandwidth, for people.
  std::vector<double> bus_bandwidths;
  for (const RankView& view : views)
    for (const TraceEvent* e : view.cpu)
      if (e->name == "record_param_comms" && (e->collective == "allreduce" || e->collective == "all_reduce") && e->dur_us > 0) {
        const double n = std::max<double>(static_cast<double>(e->group_ranks.size()), 2);
        bus_bandwidths.push_back(2 * (n - 1) / n * e->in_elements * dtype_bytes(e->dtype) / (e->dur_us * 1e-6));
      }
  if (!bus_bandwidths.empty()) result.allreduce_bus_bandwidth_Bps = median(bus_bandwidths);

  for (const RankView& view : views)
    for (const Action& a : view.actions) {
      TimelineRecord record;
      record.host = host_prefix + std::to_string(view.rank);
      record.stage = a.stage;
      record.action = a.kind;
      record.micro_batch = a.micro_batch;
      record.mini_batch = a.mini_batch;
      record.start_s = a.start_us;
      record.end_s = a.end_us;
      records.push_back(record);
    }
  // Seconds from the first record; microseconds in the traces.
  double origin = kInfinity;
  for (const TimelineRecord& r : records) origin = std::min(origin, r.start_s);
  for (TimelineRecord& r : records) {
    // Rounded to the nanosecond: the traces' resolution.
    r.start_s = std::round((r.start_s - origin) * 1e3) / 1e9;
    r.end_s = std::round((r.end_s - origin) * 1e3) / 1e9;
  }
  std::stable_sort(records.begin(), records.end(), [](const TimelineRecord& a, const TimelineRecord& b) {
    return std::tie(a.start_s, a.host, a.end_s, a.action, a.stage, a.micro_batch) <
           std::tie(b.start_s, b.host, b.end_s, b.action, b.stage, b.micro_batch);
  });
  for (int r = 0; r < ranks; ++r) result.timeline.hosts.push_back(host_prefix + std::to_string(r));
  result.timeline.records = std::move(records);

  // The profile: each stage's median times, its activation's bytes.
  std::map<std::pair<int, std::string>, std::vector<double>> durations;
  std::map<int, std::vector<double>> sent_bytes;
  std::set<int> mini_batches;
  std::set<std::tuple<int, std::string, int, int>> unsplit;  // (stage, kind, micro-batch, mini-batch)
  for (const RankView& view : views)
    for (const Action& a : view.actions)
      if (a.unsplit) unsplit.insert({a.stage, a.kind, a.micro_batch, a.mini_batch});
  for (const TimelineRecord& r : result.timeline.records) {
    mini_batches.insert(r.mini_batch);
    if (r.kind() == RecordKind::Compute && unsplit.contains({r.stage, r.action, r.micro_batch, r.mini_batch})) {
      result.micro_batches = std::max(result.micro_batches, r.micro_batch + 1);
    } else if (r.kind() == RecordKind::Compute) {
      durations[{r.stage, r.action}].push_back(r.end_s - r.start_s);
      result.micro_batches = std::max(result.micro_batches, r.micro_batch + 1);
    } else if (r.action == "SEND_F") {
      sent_bytes[r.stage].push_back(r.bytes);
    }
  }
  result.mini_batches = static_cast<int>(mini_batches.size());
  result.profile.name = fmt::format("measured by the PyTorch profiler: {} ranks, imported by pipegrid trace import", ranks);
  result.profile.micro_batch_size = options.micro_batch_size;
  for (int s = 0; s < result.stages; ++s) {
    Layer layer;
    layer.name = fmt::format("stage{}", s);
    auto typical = [&](const char* kind) -> std::optional<double> {
      const auto it = durations.find({s, kind});
      if (it == durations.end()) return std::nullopt;
      return median(it->second);
    };
    const auto forward = typical("F"), backward = typical("B"), input = typical("I"), weight = typical("W");
    if (!forward) throw InputError(fmt::format("stage {}: no forward (F) action in the traces; expected one per micro-batch", s));
    layer.forward_s = *forward;
    if (input && weight) {
      layer.backward_input_s = *input;
      layer.backward_weight_s = *weight;
    }
    layer.backward_s = backward ? *backward : input && weight ? *input + *weight : 0;
    if (backward && input && weight) {
      // Both whole and split backwards (zero-bubble schedules): I + W must be B.
      const double scale = *backward / (*input + *weight);
      layer.backward_input_s = *input * scale;
      layer.backward_weight_s = *weight * scale;
      result.notes.push_back(fmt::format("stage {}: whole (B) and split (I, W) backwards measured: I and W scaled to sum to B's "
                                         "median",
                                         s));
    }
    if (layer.backward_s <= 0) throw InputError(fmt::format("stage {}: no backward (B, or I and W) action in the traces", s));
    if (sent_bytes.contains(s)) layer.output_bytes = median(sent_bytes[s]);
    result.profile.layers.push_back(layer);
  }

  // The copy fit: per-size medians; a line when two sizes differ.
  std::vector<double> sizes, times;
  for (const auto& [bytes, list] : copy_times) {
    sizes.push_back(bytes);
    times.push_back(median(list));
  }
  if (sizes.empty()) {
    result.bandwidth_Bps = 1e15;
    result.notes.push_back("no transfer with a size: the links are free (latency 0, 1 PB/s)");
  } else if (sizes.size() == 1 || sizes.back() < 1.1 * sizes.front()) {
    double seconds = median(times), bytes = median(sizes);
    result.latency_s = 0;
    result.bandwidth_Bps = seconds > 0 ? bytes / seconds : 1e15;
    result.notes.push_back(fmt::format("one message size ({:.0f} bytes): latency 0, bandwidth = bytes / median time", bytes));
  } else {
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      n += 1;
      sx += sizes[i];
      sy += times[i];
      sxx += sizes[i] * sizes[i];
      sxy += sizes[i] * times[i];
    }
    const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    const double intercept = (sy - slope * sx) / n;
    result.latency_s = std::max(0.0, intercept);
    result.bandwidth_Bps = slope > 0 ? 1 / slope : sizes.back() / times.back();
  }
  result.program = program_that_ran(views, result.stages, result.micro_batches);
  const bool legacy = std::any_of(traces.begin(), traces.end(), [](const RankTrace& t) { return !t.rank; });
  if (legacy)
    result.notes.push_back("a trace without distributedInfo: its rank is its position on the command line, and its clock "
                           "is taken as the others' (legacy profiler traces start each process at 0)");
  std::string files;
  for (int r = 0; r < ranks; ++r) files += (r ? ", " : "") + by_rank[r]->file;
  result.platform_xml = platform_xml(result, ranks, fmt::format("{} rank traces ({})", ranks, printable(files)));
  return result;
}

}  // namespace pipegrid::kineto
