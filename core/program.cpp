#include "core/program.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/depth_first_search.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/limits.hpp"

namespace pipegrid {

char action_letter(ActionKind kind) {
  switch (kind) {
    case ActionKind::Forward: return 'F';
    case ActionKind::Backward: return 'B';
    case ActionKind::Recompute: return 'R';
    case ActionKind::BackwardInput: return 'I';
    case ActionKind::BackwardWeight: return 'W';
  }
  return '?';
}

bool DeviceProgram::holds(int stage) const { return std::find(stages.begin(), stages.end(), stage) != stages.end(); }

std::vector<int> stage_to_device(int num_stages, int stages_per_device, StageMap map) {
  if (stages_per_device < 1 || num_stages < 1 || num_stages % stages_per_device != 0)
    throw InputError(fmt::format("stage map: expected a positive multiple of {} stages per device, found {} stages",
                                 stages_per_device, num_stages));
  const int devices = num_stages / stages_per_device;
  std::vector<int> device(static_cast<std::size_t>(num_stages));
  for (int s = 0; s < num_stages; ++s) {
    const int chunk = s / devices, position = s % devices;
    // The V walks back on odd chunks.
    device[static_cast<std::size_t>(s)] = map == StageMap::V && chunk % 2 == 1 ? devices - 1 - position : position;
  }
  return device;
}

std::string to_string(const Action& action) {
  std::string text = fmt::format("{}{}{}", action.stage, action_letter(action.kind), action.micro_batch);
  if (action.mini_batch != 0) text += fmt::format("@{}", action.mini_batch);
  return text;
}

namespace {

// Parses a non-negative decimal integer spanning [first, last) that fits an
// int; false otherwise.
bool parse_count(const char* first, const char* last, int& value) {
  if (first == last) return false;
  auto [end, error] = std::from_chars(first, last, value);
  return error == std::errc() && end == last && value >= 0;
}
bool parse_count(const std::string& text, int& value) { return parse_count(text.data(), text.data() + text.size(), value); }

// "0:" -> "0", true (the text form writes the colon against the count).
bool split_colon(std::string& word) {
  if (word.size() < 2 || word.back() != ':') return false;
  word.pop_back();
  return true;
}

// The header's counts, from the text after '#': " pipegrid program: N
// stages, M micro-batches, K mini-batches" exactly (any spacing); nothing
// for another comment. Counts are integers >= 0 that fit an int.
std::optional<std::tuple<int, int, int>> parse_header(const std::string& rest) {
  std::istringstream words(rest);
  std::string pipegrid, program_word, n, stages, m, micro, k, mini, extra;
  words >> pipegrid >> program_word >> n >> stages >> m >> micro >> k >> mini;
  if (!words || pipegrid != "pipegrid" || program_word != "program:" || stages != "stages," ||
      micro != "micro-batches," || mini != "mini-batches" || (words >> extra))
    return std::nullopt;
  int counts[3] = {0, 0, 0};
  if (!parse_count(n, counts[0]) || !parse_count(m, counts[1]) || !parse_count(k, counts[2])) return std::nullopt;
  return std::tuple{counts[0], counts[1], counts[2]};
}

}  // namespace

namespace {

std::optional<ActionKind> kind_of_letter(char c) {
  switch (c) {
    case 'F': return ActionKind::Forward;
    case 'B': return ActionKind::Backward;
    case 'R': return ActionKind::Recompute;
    case 'I': return ActionKind::BackwardInput;
    case 'W': return ActionKind::BackwardWeight;
    default: return std::nullopt;
  }
}

}  // namespace

Action parse_action(const std::string& token) {
  const auto letter = std::find_if(token.begin(), token.end(), [](char c) { return kind_of_letter(c).has_value(); });
  const auto at = std::find(token.begin(), token.end(), '@');
  Action action;
  bool ok = letter != token.end() && letter < at;
  if (ok) {
    action.kind = *kind_of_letter(*letter);
    const char* base = token.data();
    ok = parse_count(base, base + (letter - token.begin()), action.stage) &&
         parse_count(base + (letter - token.begin()) + 1, base + (at - token.begin()), action.micro_batch);
    if (ok && at != token.end()) ok = parse_count(base + (at - token.begin()) + 1, base + token.size(), action.mini_batch);
  }
  if (!ok)
    throw InputError(fmt::format(
        "action '{}': expected <stage><F|B|I|W|R><micro-batch>[@<mini-batch>], e.g. 2F0, 1B3@1 or 0W2, or an overlapped "
        "pair (<action>;<action>)",
        token));
  return action;
}

namespace {

// "0", "0,7" -> stages; false on anything else.
bool parse_stage_list(const std::string& text, std::vector<int>& stages) {
  stages.clear();
  std::size_t at = 0;
  while (true) {
    const std::size_t comma = text.find(',', at);
    const std::string part = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    int stage = 0;
    if (!parse_count(part, stage)) return false;
    stages.push_back(stage);
    if (comma == std::string::npos) return true;
    at = comma + 1;
  }
}

// Appends one token of a stream: an action, or an overlapped pair
// "(a;b)" (PyTorch's "(a;b)OVERLAP_F_B" too).
void append_token(Stream& stream, const std::string& token) {
  if (token.empty() || token.front() != '(') {
    stream.actions.push_back(parse_action(token));
    return;
  }
  const std::size_t close = token.find(')');
  const std::size_t semicolon = token.find(';');
  const std::string tail = close == std::string::npos ? "" : token.substr(close + 1);
  if (close == std::string::npos || semicolon == std::string::npos || semicolon > close || (!tail.empty() && tail != "OVERLAP_F_B"))
    throw InputError(fmt::format("'{}': expected an overlapped pair (<forward>;<backward>), e.g. (0F7;7B3)", token));
  stream.overlapped.push_back(stream.actions.size());
  stream.actions.push_back(parse_action(token.substr(1, semicolon - 1)));
  stream.actions.push_back(parse_action(token.substr(semicolon + 1, close - semicolon - 1)));
}

std::string stream_tokens(const Stream& stream) {
  std::string text;
  std::size_t next_pair = 0;
  for (std::size_t k = 0; k < stream.actions.size(); ++k) {
    if (next_pair < stream.overlapped.size() && stream.overlapped[next_pair] == k && k + 1 < stream.actions.size()) {
      text += fmt::format(" ({};{})", to_string(stream.actions[k]), to_string(stream.actions[k + 1]));
      ++k;
      ++next_pair;
      continue;
    }
    text += " " + to_string(stream.actions[k]);
  }
  return text;
}

std::string stage_list(const std::vector<int>& stages) { return fmt::format("{}", fmt::join(stages, ",")); }

}  // namespace

std::string program_to_text(const Program& program) {
  std::string text = fmt::format("# pipegrid program: {} stages, {} micro-batches, {} mini-batches\n",
                                 program.num_stages, program.micro_batches, program.mini_batches);
  for (std::size_t d = 0; d < program.devices.size(); ++d) {
    const DeviceProgram& device = program.devices[d];
    for (std::size_t s = 0; s < device.streams.size(); ++s) {
      text += fmt::format("device {} {} {} replica {} stream {}:", d, device.stages.size() == 1 ? "stage" : "stages",
                          stage_list(device.stages), device.replica, s);
      text += stream_tokens(device.streams[s]) + "\n";
    }
  }
  for (const Dependency& dependency : program.extra_dependencies)
    text += fmt::format("dependency {} -> {}\n", to_string(dependency.before), to_string(dependency.after));
  for (const AllReduce& all_reduce : program.all_reduces) {
    text += fmt::format("allreduce stage {} round {}{}: ready", all_reduce.stage, all_reduce.round,
                        all_reduce.per_layer ? " per-layer" : all_reduce.bucketed ? " bucketed" : "");
    for (const Action& action : all_reduce.ready) text += " " + to_string(action);
    if (!all_reduce.release.empty()) text += " release";
    for (const Action& action : all_reduce.release) text += " " + to_string(action);
    text += "\n";
  }
  return text;
}

Program parse_program_text(const std::string& text, const std::string& origin) {
  Program program;
  std::istringstream lines(text);
  std::string line;
  int line_number = 0;
  bool have_header = false;
  // The line of each (stage, round) all-reduce declared so far.
  std::map<std::pair<int, int>, int> all_reduce_line;
  auto fail = [&](const std::string& what) {
    throw InputError(fmt::format("{}:{}: {}", origin, line_number, what));
  };
  while (std::getline(lines, line)) {
    ++line_number;
    if (line.empty()) continue;
    std::istringstream words(line);
    std::string word;
    words >> word;
    try {
      if (word == "#") {
        std::string rest;
        std::getline(words, rest);
        if (const auto header = parse_header(rest)) {
          if (have_header) fail("expected one header line '# pipegrid program: ...', found a second one");
          const auto [stages, micro_batches, mini_batches] = *header;
          if (stages > limits::kMaxStages || micro_batches > limits::kMaxMicroBatches ||
              mini_batches > limits::kMaxMiniBatches ||
              static_cast<long long>(stages) * micro_batches * mini_batches > limits::kMaxWorkItems)
            fail(fmt::format("expected at most {} stages, {} micro-batches, {} mini-batches and {} stages x micro-batches "
                             "x mini-batches (docs/formats.md, Limits), found {} stages, {} micro-batches, {} mini-batches",
                             limits::kMaxStages, limits::kMaxMicroBatches, limits::kMaxMiniBatches, limits::kMaxWorkItems,
                             stages, micro_batches, mini_batches));
          program.num_stages = stages;
          program.micro_batches = micro_batches;
          program.mini_batches = mini_batches;
          have_header = true;
        }
      } else if (word == "device") {
        std::string device_word, stage_word, stage_count, replica_word, replica_count, stream_word, stream_count, colon;
        words >> device_word >> stage_word >> stage_count >> replica_word >> replica_count >> stream_word >> stream_count;
        if (split_colon(stream_count))
          colon = ":";
        else
          words >> colon;
        int device_number = 0, replica = 0, stream_number = 0;
        std::vector<int> stages;
        if (!words || (stage_word != "stage" && stage_word != "stages") || replica_word != "replica" ||
            stream_word != "stream" || colon != ":" || !parse_count(device_word, device_number) ||
            !parse_stage_list(stage_count, stages) || (stage_word == "stage" && stages.size() != 1) ||
            !parse_count(replica_count, replica) || !parse_count(stream_count, stream_number))
          fail("expected 'device D stage S replica R stream T : actions...' or 'device D stages S1,S2,... replica R stream T "
               ": actions...' (counts: integers >= 0)");
        if (stages.size() > static_cast<std::size_t>(limits::kMaxStages))
          fail(fmt::format("expected at most {} stages on a device, found {}", limits::kMaxStages, stages.size()));
        const auto device_index = static_cast<std::size_t>(device_number);
        const auto stream_index = static_cast<std::size_t>(stream_number);
        if (device_index > program.devices.size()) fail(fmt::format("device {} listed before device {}", device_index, program.devices.size()));
        if (device_index == program.devices.size()) program.devices.push_back({stages, replica, {}});
        DeviceProgram& device = program.devices[device_index];
        if (device.stages != stages || device.replica != replica) fail(fmt::format("device {} changes its stages or replica", device_index));
        if (stream_index != device.streams.size()) fail(fmt::format("expected stream {}, found stream {}", device.streams.size(), stream_index));
        Stream stream;
        while (words >> word) append_token(stream, word);
        device.streams.push_back(std::move(stream));
      } else if (word == "dependency") {
        std::string before, arrow, after;
        words >> before >> arrow >> after;
        if (arrow != "->" || after.empty()) fail("expected 'dependency <action> -> <action>'");
        program.extra_dependencies.push_back({parse_action(before), parse_action(after)});
      } else if (word == "allreduce") {
        AllReduce all_reduce;
        std::string stage_word, stage_count, round_word, round_count, word3;
        words >> stage_word >> stage_count >> round_word >> round_count;
        if (split_colon(round_count))
          word3 = ":";
        else
          words >> word3;
        if (!words || !parse_count(stage_count, all_reduce.stage) || !parse_count(round_count, all_reduce.round))
          fail("expected 'allreduce stage S round R [per-layer|bucketed] : ready <actions> [release <actions>]' (S, R: integers >= 0)");
        for (const auto& [mode, flag] : {std::pair{"per-layer", &AllReduce::per_layer}, std::pair{"bucketed", &AllReduce::bucketed}}) {
          if (word3 == std::string(mode) + ":") {
            all_reduce.*flag = true;
            word3 = ":";
          } else if (word3 == mode) {
            all_reduce.*flag = true;
            words >> word3;
          }
        }
        std::string ready_word;
        words >> ready_word;
        if (!words || stage_word != "stage" || round_word != "round" || word3 != ":" || ready_word != "ready")
          fail("expected 'allreduce stage S round R [per-layer|bucketed] : ready <actions> [release <actions>]'");
        bool releasing = false;
        while (words >> word) {
          if (word == "release" && !releasing) {
            releasing = true;
            continue;
          }
          (releasing ? all_reduce.release : all_reduce.ready).push_back(parse_action(word));
        }
        const auto [first, inserted] = all_reduce_line.emplace(std::pair{all_reduce.stage, all_reduce.round}, line_number);
        if (!inserted)
          fail(fmt::format("allreduce stage {} round {} is declared a second time (first on line {}); expected one line per "
                           "stage and round",
                           all_reduce.stage, all_reduce.round, first->second));
        program.all_reduces.push_back(std::move(all_reduce));
      } else {
        fail(fmt::format("expected a line starting with '#', 'device', 'dependency' or 'allreduce', found '{}'", word));
      }
    } catch (const InputError& error) {
      if (std::string(error.what()).rfind(origin, 0) == 0) throw;
      fail(error.what());
    }
  }
  if (!have_header) throw InputError(fmt::format("{}: missing header line '# pipegrid program: N stages, M micro-batches, K mini-batches'", origin));
  return program;
}

namespace {

// Position of an action in a Program.
struct Slot {
  std::size_t device = 0, stream = 0, step = 0;
};

// Device x step grid, one row per stream, with `<-- ERROR HERE` after the
// marked steps of each row; rows end in a line break except the last.
std::string render_grid(const Program& program, const std::set<std::tuple<std::size_t, std::size_t, std::size_t>>& marks) {
  std::size_t width = 0;
  for (const auto& device : program.devices)
    for (const auto& stream : device.streams)
      for (const auto& action : stream.actions) width = std::max(width, to_string(action).size());
  std::string grid;
  for (std::size_t d = 0; d < program.devices.size(); ++d)
    for (std::size_t s = 0; s < program.devices[d].streams.size(); ++s) {
      std::string row = fmt::format("device {} stream {} |", d, s);
      std::string note;
      const auto& actions = program.devices[d].streams[s].actions;
      for (std::size_t k = 0; k < actions.size(); ++k) {
        const bool marked = marks.count({d, s, k}) != 0;
        row += fmt::format(" {}{:<{}}", marked ? '>' : ' ', to_string(actions[k]), width);
        if (marked) note += fmt::format("  <-- ERROR HERE (step {}: {})", k, to_string(actions[k]));
      }
      grid += (grid.empty() ? "" : "\n") + row + note;
    }
  return grid;
}

}  // namespace

namespace {

// A cycle of waits among the actions that cannot run, found with
// Boost.Graph: `waits[a]` lists what action a waits for (a data or extra
// dependency not met, or the action before it on its stream). Returns the
// cycle's actions in wait order (each waits for the next, the last for the
// first), or nothing when the waits form no cycle.
std::vector<std::size_t> find_wait_cycle(const std::vector<std::vector<std::size_t>>& waits) {
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
  Graph graph(waits.size());
  for (std::size_t a = 0; a < waits.size(); ++a)
    for (std::size_t b : waits[a]) boost::add_edge(a, b, graph);
  struct BackEdge : boost::default_dfs_visitor {
    std::optional<std::pair<std::size_t, std::size_t>>* found;
    void back_edge(boost::graph_traits<Graph>::edge_descriptor edge, const Graph& g) const {
      if (!*found) *found = std::pair{boost::source(edge, g), boost::target(edge, g)};
    }
  };
  std::optional<std::pair<std::size_t, std::size_t>> back;
  std::vector<boost::default_color_type> colors(waits.size());
  BackEdge visitor;
  visitor.found = &back;
  boost::depth_first_search(graph, boost::visitor(visitor).color_map(
                                       boost::make_iterator_property_map(colors.begin(), boost::get(boost::vertex_index, graph))));
  if (!back) return {};
  // The back edge (u -> v) closes a path v -> ... -> u of the DFS tree: walk
  // from v to u along waits restricted to a shortest path (BFS).
  const auto [u, v] = *back;
  std::vector<std::size_t> parent(waits.size(), waits.size());
  std::vector<std::size_t> queue{v};
  parent[v] = v;
  for (std::size_t head = 0; head < queue.size() && parent[u] == waits.size(); ++head)
    for (std::size_t next : waits[queue[head]])
      if (parent[next] == waits.size()) {
        parent[next] = queue[head];
        queue.push_back(next);
      }
  std::vector<std::size_t> cycle;
  for (std::size_t at = u; at != v; at = parent[at]) cycle.push_back(at);
  cycle.push_back(v);
  std::reverse(cycle.begin(), cycle.end());
  return cycle;  // v waits for ... waits for u, which waits for v
}

}  // namespace

void validate_program(const Program& program) {
  using Mark = std::tuple<std::size_t, std::size_t, std::size_t>;
  auto reject = [&](const std::string& why, const std::set<Mark>& marks) {
    throw ProgramError(fmt::format("invalid program: {}\n{}", why, render_grid(program, marks)));
  };
  if (program.num_stages < 1 || program.micro_batches < 1 || program.mini_batches < 1)
    throw ProgramError(fmt::format("invalid program: expected at least 1 stage, micro-batch and mini-batch, found {}, {}, {}",
                                   program.num_stages, program.micro_batches, program.mini_batches));
  // A layout's d pipelines run micro-batches j d + q: their items count
  // against the limit over the replicas.
  if (static_cast<long long>(program.num_stages) * program.micro_batches * program.mini_batches >
      limits::kMaxReplicatedWorkItems)
    throw ProgramError(fmt::format("invalid program: expected at most {} stages x micro-batches x mini-batches "
                                   "(docs/formats.md, Limits), found {} x {} x {}",
                                   limits::kMaxReplicatedWorkItems, program.num_stages, program.micro_batches,
                                   program.mini_batches));

  // Which device holds each (stage, replica); a device of several stages
  // holds one replica of each, and the other replicas of them are devices of
  // the same stages (whole pipelines replicated).
  std::map<std::pair<int, int>, std::size_t> holder;
  std::map<int, std::vector<std::size_t>> devices_of_stage;
  for (std::size_t d = 0; d < program.devices.size(); ++d) {
    const DeviceProgram& device = program.devices[d];
    if (device.stages.empty()) reject(fmt::format("device {} holds no stage", d), {});
    for (std::size_t i = 0; i < device.stages.size(); ++i) {
      const int stage = device.stages[i];
      if (stage >= program.num_stages)
        reject(fmt::format("device {} holds stage {}, beyond the program's {} stages", d, stage, program.num_stages), {});
      if (std::find(device.stages.begin(), device.stages.begin() + static_cast<std::ptrdiff_t>(i), stage) !=
          device.stages.begin() + static_cast<std::ptrdiff_t>(i))
        reject(fmt::format("device {} lists stage {} twice", d, stage), {});
      auto [it, inserted] = holder.emplace(std::pair{stage, device.replica}, d);
      if (!inserted) reject(fmt::format("devices {} and {} both hold stage {} replica {}", it->second, d, stage, device.replica), {});
      devices_of_stage[stage].push_back(d);
    }
  }
  for (std::size_t d = 0; d < program.devices.size(); ++d) {
    const DeviceProgram& device = program.devices[d];
    if (device.stages.size() < 2) continue;
    for (int stage : device.stages)
      for (const std::size_t other : devices_of_stage[stage]) {
        std::vector<int> mine = device.stages, theirs = program.devices[other].stages;
        std::sort(mine.begin(), mine.end());
        std::sort(theirs.begin(), theirs.end());
        if (mine != theirs)
          reject(fmt::format("device {} holds several stages ({}), so every replica of them must hold the same "
                             "stages, but device {} (replica {}) holds {}",
                             d, stage_list(device.stages), other, program.devices[other].replica,
                             stage_list(program.devices[other].stages)),
                 {});
      }
  }

  std::map<Action, Slot> where;
  for (std::size_t d = 0; d < program.devices.size(); ++d) {
    const DeviceProgram& device = program.devices[d];
    for (std::size_t s = 0; s < device.streams.size(); ++s) {
      const auto& actions = device.streams[s].actions;
      for (std::size_t k = 0; k < actions.size(); ++k) {
        const Action& action = actions[k];
        if (!device.holds(action.stage))
          reject(device.stages.size() == 1
                     ? fmt::format("{} belongs to stage {}, but device {} runs stage {}", to_string(action), action.stage, d,
                                   device.stages.front())
                     : fmt::format("{} belongs to stage {}, but device {} holds stages {}", to_string(action), action.stage, d,
                                   stage_list(device.stages)),
                 {{d, s, k}});
        if (action.micro_batch >= program.micro_batches || action.mini_batch >= program.mini_batches)
          reject(fmt::format("{} is outside {} micro-batches x {} mini-batches", to_string(action), program.micro_batches, program.mini_batches), {{d, s, k}});
        auto [it, inserted] = where.emplace(action, Slot{d, s, k});
        if (!inserted)
          reject(fmt::format("{} appears twice", to_string(action)), {{d, s, k}, {it->second.device, it->second.stream, it->second.step}});
      }
    }
  }
  auto slot_mark = [&](const Action& action) -> std::set<Mark> {
    const Slot& slot = where.at(action);
    return {{slot.device, slot.stream, slot.step}};
  };
  // Every (stage, micro-batch, mini-batch): one F and a B, or an I and a W.
  for (int k = 0; k < program.mini_batches; ++k)
    for (int stage = 0; stage < program.num_stages; ++stage)
      for (int m = 0; m < program.micro_batches; ++m) {
        const Action forward{ActionKind::Forward, stage, m, k}, whole{ActionKind::Backward, stage, m, k},
            input{ActionKind::BackwardInput, stage, m, k}, weight{ActionKind::BackwardWeight, stage, m, k};
        if (!where.count(forward)) reject(fmt::format("{} is missing", to_string(forward)), {});
        const bool has_whole = where.count(whole) != 0, has_input = where.count(input) != 0, has_weight = where.count(weight) != 0;
        if (has_whole && (has_input || has_weight))
          reject(fmt::format("{} runs a whole backward {} and also {}: a micro-batch of a stage runs B, or I and W",
                             to_string(forward), to_string(whole), to_string(has_input ? input : weight)),
                 slot_mark(has_input ? input : weight));
        if (!has_whole && !has_input && !has_weight)
          reject(fmt::format("{} is missing (or {} and {})", to_string(whole), to_string(input), to_string(weight)), {});
        if (has_input != has_weight)
          reject(fmt::format("{} is missing: an {} needs its {}", to_string(has_input ? weight : input),
                             has_input ? "input-gradient half" : "weight-gradient half", has_input ? "W" : "I"),
                 slot_mark(has_input ? input : weight));
      }

  // Dependencies of each action: the implied data dependencies, then the extra ones.
  std::map<Action, std::vector<Action>> needs;
  auto gradient_of = [&](int stage, const Action& action) {
    const Action whole{ActionKind::Backward, stage, action.micro_batch, action.mini_batch};
    return where.count(whole) ? whole : Action{ActionKind::BackwardInput, stage, action.micro_batch, action.mini_batch};
  };
  for (const auto& [action, slot] : where) {
    auto& list = needs[action];
    const Action forward{ActionKind::Forward, action.stage, action.micro_batch, action.mini_batch};
    switch (action.kind) {
      case ActionKind::Forward:
        if (action.stage > 0) list.push_back({ActionKind::Forward, action.stage - 1, action.micro_batch, action.mini_batch});
        break;
      case ActionKind::Recompute: {
        list.push_back(forward);
        const Action whole{ActionKind::Backward, action.stage, action.micro_batch, action.mini_batch};
        if (!where.count(whole) && !where.count({ActionKind::BackwardInput, action.stage, action.micro_batch, action.mini_batch}))
          reject(fmt::format("{} recomputes for a backward that is not in the program", to_string(action)), slot_mark(action));
        break;
      }
      case ActionKind::Backward:
      case ActionKind::BackwardInput: {
        list.push_back(forward);
        if (action.stage + 1 < program.num_stages) list.push_back(gradient_of(action.stage + 1, action));
        const Action recompute{ActionKind::Recompute, action.stage, action.micro_batch, action.mini_batch};
        if (auto r = where.find(recompute); r != where.end()) {
          if (r->second.device != slot.device)
            reject(fmt::format("{} runs on device {}, its backward on device {}", to_string(recompute), r->second.device, slot.device),
                   {{r->second.device, r->second.stream, r->second.step}});
          list.push_back(recompute);
        }
        break;
      }
      case ActionKind::BackwardWeight:
        list.push_back({ActionKind::BackwardInput, action.stage, action.micro_batch, action.mini_batch});
        break;
    }
  }
  for (const Dependency& dependency : program.extra_dependencies) {
    auto after = where.find(dependency.after);
    if (!where.count(dependency.before) || after == where.end())
      reject(fmt::format("dependency {} -> {} names an action that is not in the program", to_string(dependency.before), to_string(dependency.after)), {});
    needs[dependency.after].push_back(dependency.before);
  }

  // Overlapped pairs: positions in range, ascending, not chained; one F
  // and one B or I that do not depend on each other.
  for (std::size_t d = 0; d < program.devices.size(); ++d)
    for (std::size_t s = 0; s < program.devices[d].streams.size(); ++s) {
      const Stream& stream = program.devices[d].streams[s];
      for (std::size_t p = 0; p < stream.overlapped.size(); ++p) {
        const std::size_t i = stream.overlapped[p];
        if (i + 1 >= stream.actions.size() || (p > 0 && i <= stream.overlapped[p - 1] + 1))
          reject(fmt::format("device {} stream {}: overlapped pair at step {}: expected ascending positions of two "
                             "actions each, not sharing one",
                             d, s, i),
                 {});
        const Action& a = stream.actions[i];
        const Action& b = stream.actions[i + 1];
        const bool shape = (a.kind == ActionKind::Forward && is_input_gradient(b.kind)) ||
                           (b.kind == ActionKind::Forward && is_input_gradient(a.kind));
        if (!shape)
          reject(fmt::format("overlapped pair ({};{}): expected one forward and one backward (B or I)", to_string(a), to_string(b)),
                 {{d, s, i}, {d, s, i + 1}});
        for (const auto& [x, y] : {std::pair{a, b}, std::pair{b, a}})
          for (const Action& need : needs[x])
            if (need == y)
              reject(fmt::format("overlapped pair ({};{}): {} needs {}, so they cannot run together", to_string(a), to_string(b),
                                 to_string(x), to_string(y)),
                     {{d, s, i}, {d, s, i + 1}});
      }
    }

  // All-reduces: the final backwards (B, or W when split) of their stage on
  // distinct devices; released actions wait for them.
  std::map<Action, std::vector<std::size_t>> released_by;
  std::vector<std::vector<std::size_t>> participants(program.all_reduces.size());
  std::set<std::pair<int, int>> stage_rounds;
  for (std::size_t c = 0; c < program.all_reduces.size(); ++c) {
    const AllReduce& all_reduce = program.all_reduces[c];
    const std::string name = fmt::format("allreduce stage {} round {}", all_reduce.stage, all_reduce.round);
    if (!stage_rounds.insert({all_reduce.stage, all_reduce.round}).second)
      reject(fmt::format("{} is declared twice; expected one all-reduce per stage and round", name), {});
    if (all_reduce.ready.empty()) reject(fmt::format("{} has no ready backward", name), {});
    if (all_reduce.per_layer && all_reduce.bucketed)
      reject(fmt::format("{} is both per-layer and bucketed; expected one of them", name), {});
    for (const Action& action : all_reduce.ready) {
      auto it = where.find(action);
      if (it == where.end()) reject(fmt::format("{} names {}, which is not in the program", name, to_string(action)), {});
      if ((action.kind != ActionKind::Backward && action.kind != ActionKind::BackwardWeight) ||
          !program.devices[it->second.device].holds(all_reduce.stage))
        reject(fmt::format("{}: expected backwards (B or W) on devices that hold stage {}, found {}", name,
                           all_reduce.stage, to_string(action)),
               {{it->second.device, it->second.stream, it->second.step}});
      if (std::find(participants[c].begin(), participants[c].end(), it->second.device) != participants[c].end())
        reject(fmt::format("{}: device {} is named twice", name, it->second.device),
               {{it->second.device, it->second.stream, it->second.step}});
      participants[c].push_back(it->second.device);
    }
    for (const Action& action : all_reduce.release) {
      if (!where.count(action)) reject(fmt::format("{} releases {}, which is not in the program", name, to_string(action)), {});
      released_by[action].push_back(c);
    }
  }

  // A backward listed before its own forward on the same stream can never run.
  for (const auto& [action, slot] : where) {
    if (action.kind == ActionKind::Forward) continue;
    const Slot& forward = where.at({ActionKind::Forward, action.stage, action.micro_batch, action.mini_batch});
    if (forward.device == slot.device && forward.stream == slot.stream && forward.step > slot.step)
      reject(fmt::format("{} comes before its forward {} on the same stream", to_string(action), to_string({ActionKind::Forward, action.stage, action.micro_batch, action.mini_batch})),
             {{slot.device, slot.stream, slot.step}});
  }

  // Run the program logically (no times): every stream advances while its
  // next action (both actions of an overlapped pair) has all it needs.
  // Whatever is left is a deadlock. An all-reduce completes once all its
  // ready backwards have run and every earlier all-reduce of each of its
  // devices has completed.
  std::set<Action> done;
  std::vector<bool> reduced(program.all_reduces.size(), false);
  auto all_reduce_can_complete = [&](std::size_t c) {
    for (const Action& ready : program.all_reduces[c].ready)
      if (!done.count(ready)) return false;
    for (std::size_t earlier = 0; earlier < c; ++earlier)
      if (!reduced[earlier])
        for (std::size_t device : participants[earlier])
          if (std::find(participants[c].begin(), participants[c].end(), device) != participants[c].end()) return false;
    return true;
  };
  auto released = [&](const Action& action) {
    auto it = released_by.find(action);
    return it == released_by.end() ||
           std::all_of(it->second.begin(), it->second.end(), [&](std::size_t c) { return reduced[c]; });
  };
  auto can_run = [&](const Action& action) {
    const auto& list = needs[action];
    return std::all_of(list.begin(), list.end(), [&](const Action& need) { return done.count(need) != 0; }) && released(action);
  };
  auto pair_at = [](const Stream& stream, std::size_t step) {
    return std::binary_search(stream.overlapped.begin(), stream.overlapped.end(), step);
  };
  std::vector<std::vector<std::size_t>> next(program.devices.size());
  for (std::size_t d = 0; d < program.devices.size(); ++d) next[d].assign(program.devices[d].streams.size(), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t c = 0; c < program.all_reduces.size(); ++c)
      if (!reduced[c] && all_reduce_can_complete(c)) reduced[c] = progress = true;
    for (std::size_t d = 0; d < program.devices.size(); ++d)
      for (std::size_t s = 0; s < program.devices[d].streams.size(); ++s) {
        const Stream& stream = program.devices[d].streams[s];
        while (next[d][s] < stream.actions.size()) {
          const std::size_t step = next[d][s];
          const std::size_t width = pair_at(stream, step) ? 2 : 1;
          bool ready = true;
          for (std::size_t j = 0; j < width; ++j) ready = ready && can_run(stream.actions[step + j]);
          if (!ready) break;
          for (std::size_t j = 0; j < width; ++j) done.insert(stream.actions[step + j]);
          next[d][s] += width;
          progress = true;
        }
      }
  }
  std::set<Mark> stuck;
  std::string waits;
  for (std::size_t d = 0; d < program.devices.size(); ++d)
    for (std::size_t s = 0; s < program.devices[d].streams.size(); ++s) {
      const Stream& stream = program.devices[d].streams[s];
      if (next[d][s] == stream.actions.size()) continue;
      const std::size_t step = next[d][s];
      const std::size_t width = pair_at(stream, step) ? 2 : 1;
      for (std::size_t j = 0; j < width; ++j) {
        stuck.insert({d, s, step + j});
        const Action& action = stream.actions[step + j];
        for (const Action& need : needs[action])
          if (!done.count(need)) waits += fmt::format(" {} waits for {};", to_string(action), to_string(need));
        if (auto it = released_by.find(action); it != released_by.end())
          for (std::size_t c : it->second)
            if (!reduced[c])
              waits += fmt::format(" {} waits for allreduce stage {} round {};", to_string(action),
                                   program.all_reduces[c].stage, program.all_reduces[c].round);
      }
    }
  if (stuck.empty()) return;
  // The cycle of waits behind the deadlock: among the actions not run, each
  // waits for its unmet needs and for the action before it on its stream.
  std::vector<Action> pending;
  std::map<Action, std::size_t> pending_index;
  for (const auto& [action, slot] : where)
    if (!done.count(action)) {
      pending_index[action] = pending.size();
      pending.push_back(action);
    }
  std::vector<std::vector<std::size_t>> wait_graph(pending.size());
  std::vector<std::string> reason(pending.size());
  for (std::size_t a = 0; a < pending.size(); ++a) {
    const Action& action = pending[a];
    const Slot& slot = where.at(action);
    for (const Action& need : needs[action])
      if (auto it = pending_index.find(need); it != pending_index.end()) wait_graph[a].push_back(it->second);
    // The action before it on its stream (the partner of an overlapped
    // pair runs with it, not before it).
    const Stream& stream = program.devices[slot.device].streams[slot.stream];
    std::size_t steps_back = 1;
    if (slot.step > 0 && pair_at(stream, slot.step - 1)) steps_back = 2;
    if (slot.step >= steps_back)
      if (auto it = pending_index.find(stream.actions[slot.step - steps_back]); it != pending_index.end())
        wait_graph[a].push_back(it->second);
    // An overlapped pair starts when both can: each waits for its partner.
    std::optional<std::size_t> partner;
    if (pair_at(stream, slot.step)) partner = slot.step + 1;
    if (slot.step > 0 && pair_at(stream, slot.step - 1)) partner = slot.step - 1;
    if (partner)
      if (auto it = pending_index.find(stream.actions[*partner]); it != pending_index.end()) wait_graph[a].push_back(it->second);
  }
  const std::vector<std::size_t> cycle = find_wait_cycle(wait_graph);
  std::string cycle_text;
  if (!cycle.empty()) {
    for (std::size_t i = 0; i < cycle.size(); ++i) {
      const Action& a = pending[cycle[i]];
      const Action& b = pending[cycle[(i + 1) % cycle.size()]];
      const bool needed = std::find(needs[a].begin(), needs[a].end(), b) != needs[a].end();
      const Slot& sa = where.at(a);
      const Slot& sb = where.at(b);
      const bool partners = sa.device == sb.device && sa.stream == sb.stream && (sa.step + 1 == sb.step || sb.step + 1 == sa.step) &&
                            pair_at(program.devices[sa.device].streams[sa.stream], std::min(sa.step, sb.step));
      cycle_text += fmt::format("\n  {} (device {}) waits for {} ({})", to_string(a), sa.device, to_string(b),
                                needed     ? "needs it"
                                : partners ? "its overlapped partner"
                                           : "listed before it on its stream");
    }
    reject(fmt::format("deadlock: no stream can advance:{}\ncycle of waits:{}", waits, cycle_text), stuck);
  }
  reject(fmt::format("deadlock: no stream can advance:{}", waits), stuck);
}

}  // namespace pipegrid
