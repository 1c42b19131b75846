#include "core/program.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/limits.hpp"

namespace pipegrid {

char action_letter(ActionKind kind) {
  switch (kind) {
    case ActionKind::Forward: return 'F';
    case ActionKind::Backward: return 'B';
    case ActionKind::Recompute: return 'R';
  }
  return '?';
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

Action parse_action(const std::string& token) {
  const auto letter = std::find_if(token.begin(), token.end(), [](char c) { return c == 'F' || c == 'B' || c == 'R'; });
  const auto at = std::find(token.begin(), token.end(), '@');
  Action action;
  bool ok = letter != token.end() && letter < at;
  if (ok) {
    action.kind = *letter == 'F' ? ActionKind::Forward : *letter == 'B' ? ActionKind::Backward : ActionKind::Recompute;
    const char* base = token.data();
    ok = parse_count(base, base + (letter - token.begin()), action.stage) &&
         parse_count(base + (letter - token.begin()) + 1, base + (at - token.begin()), action.micro_batch);
    if (ok && at != token.end()) ok = parse_count(base + (at - token.begin()) + 1, base + token.size(), action.mini_batch);
  }
  if (!ok)
    throw InputError(fmt::format(
        "action '{}': expected <stage><F|B|R><micro-batch>[@<mini-batch>], e.g. 2F0 or 1B3@1", token));
  return action;
}

std::string program_to_text(const Program& program) {
  std::string text = fmt::format("# pipegrid program: {} stages, {} micro-batches, {} mini-batches\n",
                                 program.num_stages, program.micro_batches, program.mini_batches);
  for (std::size_t d = 0; d < program.devices.size(); ++d) {
    const DeviceProgram& device = program.devices[d];
    for (std::size_t s = 0; s < device.streams.size(); ++s) {
      text += fmt::format("device {} stage {} replica {} stream {}:", d, device.stage, device.replica, s);
      for (const Action& action : device.streams[s].actions) text += " " + to_string(action);
      text += "\n";
    }
  }
  for (const Dependency& dependency : program.extra_dependencies)
    text += fmt::format("dependency {} -> {}\n", to_string(dependency.before), to_string(dependency.after));
  for (const AllReduce& all_reduce : program.all_reduces) {
    text += fmt::format("allreduce stage {} round {}{}: ready", all_reduce.stage, all_reduce.round,
                        all_reduce.per_layer ? " per-layer" : "");
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
        int device_number = 0, stage = 0, replica = 0, stream_number = 0;
        if (!words || stage_word != "stage" || replica_word != "replica" || stream_word != "stream" || colon != ":" ||
            !parse_count(device_word, device_number) || !parse_count(stage_count, stage) ||
            !parse_count(replica_count, replica) || !parse_count(stream_count, stream_number))
          fail("expected 'device D stage S replica R stream T : actions...' (counts: integers >= 0)");
        const auto device_index = static_cast<std::size_t>(device_number);
        const auto stream_index = static_cast<std::size_t>(stream_number);
        if (device_index > program.devices.size()) fail(fmt::format("device {} listed before device {}", device_index, program.devices.size()));
        if (device_index == program.devices.size()) program.devices.push_back({stage, replica, {}});
        DeviceProgram& device = program.devices[device_index];
        if (device.stage != stage || device.replica != replica) fail(fmt::format("device {} changes its stage or replica", device_index));
        if (stream_index != device.streams.size()) fail(fmt::format("expected stream {}, found stream {}", device.streams.size(), stream_index));
        Stream stream;
        while (words >> word) stream.actions.push_back(parse_action(word));
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
          fail("expected 'allreduce stage S round R [per-layer] : ready <actions> [release <actions>]' (S, R: integers >= 0)");
        if (word3 == "per-layer:") {
          all_reduce.per_layer = true;
          word3 = ":";
        } else if (word3 == "per-layer") {
          all_reduce.per_layer = true;
          words >> word3;
        }
        std::string ready_word;
        words >> ready_word;
        if (!words || stage_word != "stage" || round_word != "round" || word3 != ":" || ready_word != "ready")
          fail("expected 'allreduce stage S round R [per-layer] : ready <actions> [release <actions>]'");
        bool releasing = false;
        while (words >> word) {
          if (word == "release" && !releasing) {
            releasing = true;
            continue;
          }
          (releasing ? all_reduce.release : all_reduce.ready).push_back(parse_action(word));
        }
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
// marked steps of each row.
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
      grid += row + note + "\n";
    }
  return grid;
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
  if (static_cast<long long>(program.num_stages) * program.micro_batches * program.mini_batches > limits::kMaxWorkItems)
    throw ProgramError(fmt::format("invalid program: expected at most {} stages x micro-batches x mini-batches "
                                   "(docs/formats.md, Limits), found {} x {} x {}",
                                   limits::kMaxWorkItems, program.num_stages, program.micro_batches, program.mini_batches));

  std::map<Action, Slot> where;
  for (std::size_t d = 0; d < program.devices.size(); ++d) {
    const DeviceProgram& device = program.devices[d];
    for (std::size_t s = 0; s < device.streams.size(); ++s) {
      const auto& actions = device.streams[s].actions;
      for (std::size_t k = 0; k < actions.size(); ++k) {
        const Action& action = actions[k];
        if (action.stage != device.stage)
          reject(fmt::format("{} belongs to stage {}, but device {} runs stage {}", to_string(action), action.stage, d, device.stage), {{d, s, k}});
        if (action.micro_batch >= program.micro_batches || action.mini_batch >= program.mini_batches)
          reject(fmt::format("{} is outside {} micro-batches x {} mini-batches", to_string(action), program.micro_batches, program.mini_batches), {{d, s, k}});
        auto [it, inserted] = where.emplace(action, Slot{d, s, k});
        if (!inserted)
          reject(fmt::format("{} appears twice", to_string(action)), {{d, s, k}, {it->second.device, it->second.stream, it->second.step}});
      }
    }
  }
  for (int k = 0; k < program.mini_batches; ++k)
    for (int stage = 0; stage < program.num_stages; ++stage)
      for (int m = 0; m < program.micro_batches; ++m)
        for (ActionKind kind : {ActionKind::Forward, ActionKind::Backward}) {
          const Action needed{kind, stage, m, k};
          if (!where.count(needed)) reject(fmt::format("{} is missing", to_string(needed)), {});
        }

  // Dependencies of each action: the implied data dependencies, then the extra ones.
  std::map<Action, std::vector<Action>> needs;
  for (const auto& [action, slot] : where) {
    auto& list = needs[action];
    const Action forward{ActionKind::Forward, action.stage, action.micro_batch, action.mini_batch};
    switch (action.kind) {
      case ActionKind::Forward:
        if (action.stage > 0) list.push_back({ActionKind::Forward, action.stage - 1, action.micro_batch, action.mini_batch});
        break;
      case ActionKind::Recompute:
        list.push_back(forward);
        break;
      case ActionKind::Backward: {
        list.push_back(forward);
        if (action.stage + 1 < program.num_stages)
          list.push_back({ActionKind::Backward, action.stage + 1, action.micro_batch, action.mini_batch});
        const Action recompute{ActionKind::Recompute, action.stage, action.micro_batch, action.mini_batch};
        if (auto r = where.find(recompute); r != where.end()) {
          if (r->second.device != slot.device)
            reject(fmt::format("{} runs on device {}, its backward on device {}", to_string(recompute), r->second.device, slot.device),
                   {{r->second.device, r->second.stream, r->second.step}});
          list.push_back(recompute);
        }
        break;
      }
    }
  }
  for (const Dependency& dependency : program.extra_dependencies) {
    auto after = where.find(dependency.after);
    if (!where.count(dependency.before) || after == where.end())
      reject(fmt::format("dependency {} -> {} names an action that is not in the program", to_string(dependency.before), to_string(dependency.after)), {});
    needs[dependency.after].push_back(dependency.before);
  }

  // All-reduces: backwards of their stage on distinct devices; released
  // actions wait for them.
  std::map<Action, std::vector<std::size_t>> released_by;
  std::vector<std::vector<std::size_t>> participants(program.all_reduces.size());
  for (std::size_t c = 0; c < program.all_reduces.size(); ++c) {
    const AllReduce& all_reduce = program.all_reduces[c];
    const std::string name = fmt::format("allreduce stage {} round {}", all_reduce.stage, all_reduce.round);
    if (all_reduce.ready.empty()) reject(fmt::format("{} has no ready backward", name), {});
    for (const Action& action : all_reduce.ready) {
      auto it = where.find(action);
      if (it == where.end()) reject(fmt::format("{} names {}, which is not in the program", name, to_string(action)), {});
      if (action.kind != ActionKind::Backward || action.stage != all_reduce.stage)
        reject(fmt::format("{}: expected backwards of stage {}, found {}", name, all_reduce.stage, to_string(action)),
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
  // next action has all it needs. Whatever is left is a deadlock.
  // An all-reduce completes once all its ready backwards have run and every
  // earlier all-reduce of each of its devices has completed.
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
  std::vector<std::vector<std::size_t>> next(program.devices.size());
  for (std::size_t d = 0; d < program.devices.size(); ++d) next[d].assign(program.devices[d].streams.size(), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t c = 0; c < program.all_reduces.size(); ++c)
      if (!reduced[c] && all_reduce_can_complete(c)) reduced[c] = progress = true;
    for (std::size_t d = 0; d < program.devices.size(); ++d)
      for (std::size_t s = 0; s < program.devices[d].streams.size(); ++s) {
        const auto& actions = program.devices[d].streams[s].actions;
        while (next[d][s] < actions.size()) {
          const Action& action = actions[next[d][s]];
          const auto& list = needs[action];
          if (!std::all_of(list.begin(), list.end(), [&](const Action& need) { return done.count(need) != 0; }) ||
              !released(action))
            break;
          done.insert(action);
          ++next[d][s];
          progress = true;
        }
      }
  }
  std::set<Mark> stuck;
  std::string waits;
  for (std::size_t d = 0; d < program.devices.size(); ++d)
    for (std::size_t s = 0; s < program.devices[d].streams.size(); ++s) {
      const auto& actions = program.devices[d].streams[s].actions;
      if (next[d][s] == actions.size()) continue;
      stuck.insert({d, s, next[d][s]});
      const Action& action = actions[next[d][s]];
      for (const Action& need : needs[action])
        if (!done.count(need)) waits += fmt::format(" {} waits for {};", to_string(action), to_string(need));
      if (auto it = released_by.find(action); it != released_by.end())
        for (std::size_t c : it->second)
          if (!reduced[c])
            waits += fmt::format(" {} waits for allreduce stage {} round {};", to_string(action),
                                 program.all_reduces[c].stage, program.all_reduces[c].round);
    }
  if (!stuck.empty()) reject(fmt::format("deadlock: no stream can advance:{}", waits), stuck);
}

}  // namespace pipegrid
