#include "core/torch_schedule.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/limits.hpp"
#include "core/platform_check.hpp"

namespace pipegrid {

namespace {

// The action types of PyTorch's `_ComputationType`, the older grammar's BW,
// and the legacy fused communications (recognised only to reject them).
enum class Op { F, I, B, W, BW, Unshard, Reshard, ReduceGrad, SendF, RecvF, SendB, RecvB, SendFRecvB, SendBRecvF };

struct OpName {
  std::string_view text;
  Op op;
};
// Longest first, so that a prefix match picks SEND_F_RECV_B over SEND_F and
// BW over B.
constexpr std::array<OpName, 14> kOpNames = {{
    {"SEND_F_RECV_B", Op::SendFRecvB},
    {"SEND_B_RECV_F", Op::SendBRecvF},
    {"REDUCE_GRAD", Op::ReduceGrad},
    {"UNSHARD", Op::Unshard},
    {"RESHARD", Op::Reshard},
    {"SEND_F", Op::SendF},
    {"RECV_F", Op::RecvF},
    {"SEND_B", Op::SendB},
    {"RECV_B", Op::RecvB},
    {"BW", Op::BW},
    {"F", Op::F},
    {"I", Op::I},
    {"B", Op::B},
    {"W", Op::W},
}};

bool is_compute(Op op) { return op == Op::F || op == Op::I || op == Op::B || op == Op::W || op == Op::BW; }
bool is_comm(Op op) { return op == Op::SendF || op == Op::RecvF || op == Op::SendB || op == Op::RecvB; }
bool has_micro_batch(Op op) { return op != Op::Unshard && op != Op::Reshard && op != Op::ReduceGrad; }

struct Simple {
  Op op = Op::F;
  int stage = 0;
  int micro_batch = -1;  ///< -1 for UNSHARD, RESHARD, REDUCE_GRAD
};

// One non-empty cell: one action, or an overlapped pair (two compute
// actions, `second` set).
struct Cell {
  int column = 0;  ///< from 1
  Simple first;
  std::optional<Simple> second;
  std::string text;  ///< as written, stripped
};

constexpr std::string_view kBlanks = " \t\r\n\v\f";

std::string_view strip(std::string_view text) {
  const std::size_t begin = text.find_first_not_of(kBlanks);
  if (begin == std::string_view::npos) return {};
  const std::size_t end = text.find_last_not_of(kBlanks);
  return text.substr(begin, end - begin + 1);
}

// The cell as the user wrote it, shortened, control bytes escaped.
std::string shown(std::string_view text) {
  constexpr std::size_t kMax = 60;
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < kMax; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x20 || byte >= 0x7f)
      out += fmt::format("\\x{:02x}", byte);
    else
      out += static_cast<char>(byte);
  }
  if (text.size() > kMax) out += "...";
  return "'" + out + "'";
}

constexpr std::string_view kExpectedCell =
    "an action such as 2F0, 2I0, 2W0, 2B0, (0F7;7B3)OVERLAP_F_B, 1SEND_F0, 2RECV_F0, 2SEND_B0, 1RECV_B0, "
    "1UNSHARD, 1RESHARD, 1REDUCE_GRAD, or an empty cell";

class Reader {
 public:
  explicit Reader(std::string origin) : origin_(std::move(origin)) {}

  [[noreturn]] void fail_cell(int row, int column, const std::string& what) const {
    throw InputError(fmt::format("{}: row {} (rank {}), column {} (step {}): {}", origin_, row + 1, row, column, column, what));
  }
  [[noreturn]] void fail_row(int row, const std::string& what) const {
    throw InputError(fmt::format("{}: row {} (rank {}): {}", origin_, row + 1, row, what));
  }
  [[noreturn]] void fail_file(const std::string& what) const { throw InputError(fmt::format("{}: {}", origin_, what)); }

  // Reads `text` (one simple action, stripped) of the cell at (row, column).
  Simple parse_simple(std::string_view text, int row, int column, std::string_view cell) const {
    auto fail = [&](const std::string& what) { fail_cell(row, column, fmt::format("{}, found {}", what, shown(cell))); };
    std::size_t at = 0;
    auto read_number = [&](long long& value) {
      const std::size_t begin = at;
      value = 0;
      while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
        if (value < 1'000'000'000) value = value * 10 + (text[at] - '0');
        ++at;
      }
      return at > begin;
    };
    Simple action;
    long long stage = 0;
    if (!read_number(stage)) fail(fmt::format("expected {}", kExpectedCell));
    if (stage >= limits::kMaxStages)
      fail(fmt::format("expected a stage id below {} (docs/formats.md, Limits)", limits::kMaxStages));
    action.stage = static_cast<int>(stage);
    const std::string_view rest = text.substr(at);
    const OpName* matched = nullptr;
    for (const OpName& name : kOpNames) {
      if (rest.substr(0, name.text.size()) == name.text) {
        matched = &name;
        break;
      }
    }
    if (matched == nullptr)
      fail("expected an action type after the stage number (F, I, B, W, BW, SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, "
           "RESHARD or REDUCE_GRAD)");
    action.op = matched->op;
    at += matched->text.size();
    if (action.op == Op::SendFRecvB || action.op == Op::SendBRecvF)
      fail(fmt::format("expected SEND_F, RECV_F, SEND_B or RECV_B: the legacy fused {} (PyTorch before October 2024) "
                       "is not read; write its two parts as separate cells",
                       matched->text));
    const std::size_t number_begin = at;
    long long micro_batch = 0;
    const bool has_number = read_number(micro_batch);
    if (at != text.size())
      fail(fmt::format("expected the action to end after '{}' (PyTorch's reader would ignore the rest)", text.substr(0, at)));
    if (has_micro_batch(action.op)) {
      if (!has_number) fail(fmt::format("expected a micro-batch number after '{}'", text.substr(0, number_begin)));
      if (micro_batch >= limits::kMaxMicroBatches)
        fail(fmt::format("expected a micro-batch below {} (docs/formats.md, Limits)", limits::kMaxMicroBatches));
      action.micro_batch = static_cast<int>(micro_batch);
    } else if (has_number) {
      fail(fmt::format("expected no micro-batch after {} (it names a stage only)", matched->text));
    }
    return action;
  }

  Cell parse_cell(std::string_view text, int row, int column) const {
    Cell cell;
    cell.column = column;
    cell.text = std::string(text);
    if (text.empty() || text.front() != '(') {
      cell.first = parse_simple(text, row, column, text);
      return cell;
    }
    const std::size_t close = text.rfind(')');
    if (close == std::string_view::npos)
      fail_cell(row, column, fmt::format("expected ')' closing the overlapped op, found {}", shown(text)));
    const std::string_view type = text.substr(close + 1);
    if (!type.empty() && type != "OVERLAP_F_B")
      fail_cell(row, column,
                fmt::format("expected OVERLAP_F_B (or nothing) after ')', found '{}' in {}", type, shown(text)));
    const std::string_view inner = text.substr(1, close - 1);
    std::vector<Simple> parts;
    std::size_t begin = 0;
    while (true) {
      const std::size_t end = inner.find(';', begin);
      const std::string_view part = strip(inner.substr(begin, end == std::string_view::npos ? inner.size() - begin : end - begin));
      if (part.empty())
        fail_cell(row, column, fmt::format("expected an action between '(', ';' and ')', found an empty one in {}", shown(text)));
      parts.push_back(parse_simple(part, row, column, text));
      if (end == std::string_view::npos) break;
      begin = end + 1;
      if (parts.size() > 2) break;
    }
    if (parts.size() != 2)
      fail_cell(row, column,
                fmt::format("expected two actions in an overlapped op (one F and one B or I), found {}{} in {}",
                            parts.size() > 2 ? "more than " : "", parts.size() > 2 ? 2 : parts.size(), shown(text)));
    int forwards = 0;
    int backwards = 0;
    for (const Simple& part : parts) {
      if (part.op == Op::F) ++forwards;
      if (part.op == Op::B || part.op == Op::I || part.op == Op::BW) ++backwards;
    }
    if (forwards != 1 || backwards != 1)
      fail_cell(row, column,
                fmt::format("expected one F and one B or I in an overlapped op, found {}", shown(text)));
    if (parts[0].stage == parts[1].stage && parts[0].micro_batch == parts[1].micro_batch)
      fail_cell(row, column,
                fmt::format("expected the forward and the backward of an overlapped op to be of different stages or "
                            "micro-batches (a backward needs its forward's end), found {}",
                            shown(text)));
    cell.first = parts[0];
    cell.second = parts[1];
    return cell;
  }

 private:
  std::string origin_;
};

// Per (stage, micro-batch): the column (from 1) of each action, 0 = none.
struct Slot {
  int forward = 0;
  int input_grad = 0;  ///< I
  int weight = 0;      ///< W
  int whole = 0;       ///< B
  int send_f = 0, recv_f = 0, send_b = 0, recv_b = 0;
  int gradient() const { return whole != 0 ? whole : input_grad; }
};

template <typename Fn>
void for_each_action(std::vector<Cell>& row, Fn&& fn) {
  for (Cell& cell : row) {
    fn(cell, cell.first);
    if (cell.second) fn(cell, *cell.second);
  }
}

}  // namespace

TorchCsvImport parse_torch_csv(const std::string& text, const std::string& origin) {
  const Reader reader(origin);

  // Rows and cells. Trailing empty lines are not rows.
  std::vector<std::string_view> lines;
  {
    const std::string_view all(text);
    std::size_t begin = 0;
    while (begin < all.size()) {
      std::size_t end = all.find('\n', begin);
      if (end == std::string_view::npos) end = all.size();
      std::string_view line = all.substr(begin, end - begin);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      lines.push_back(line);
      begin = end + 1;
    }
    while (!lines.empty() && strip(lines.back()).empty() && lines.back().find(',') == std::string_view::npos)
      lines.pop_back();
  }
  if (lines.empty()) reader.fail_file("expected one row of actions per rank, found no row");
  if (lines.size() > static_cast<std::size_t>(limits::kMaxDevices))
    reader.fail_file(fmt::format("expected at most {} rows (ranks; docs/formats.md, Limits), found {}", limits::kMaxDevices,
                                 lines.size()));
  const int num_ranks = static_cast<int>(lines.size());
  std::vector<std::vector<Cell>> rows(lines.size());
  int empty_cells = 0;
  for (int row = 0; row < num_ranks; ++row) {
    const std::string_view line = lines[row];
    std::size_t begin = 0;
    int column = 0;
    while (true) {
      ++column;
      const std::size_t end = line.find(',', begin);
      const std::string_view cell = strip(line.substr(begin, end == std::string_view::npos ? line.size() - begin : end - begin));
      if (cell.empty())
        ++empty_cells;
      else
        rows[row].push_back(reader.parse_cell(cell, row, column));
      if (end == std::string_view::npos) break;
      begin = end + 1;
    }
  }

  // Grammar: BW (older) and I (current) do not mix.
  const Cell* first_input_grad = nullptr;
  const Cell* first_bw = nullptr;
  int bw_row = 0;
  for (int row = 0; row < num_ranks; ++row) {
    for_each_action(rows[row], [&](Cell& cell, Simple& action) {
      if (action.op == Op::I && first_input_grad == nullptr) first_input_grad = &cell;
      if (action.op == Op::BW && first_bw == nullptr) {
        first_bw = &cell;
        bw_row = row;
      }
    });
  }
  if (first_input_grad != nullptr && first_bw != nullptr)
    reader.fail_cell(bw_row, first_bw->column,
                     fmt::format("expected B for a whole backward: BW is the older grammar's, but this file also has "
                                 "I actions (the current grammar, e.g. {}), found {}",
                                 shown(first_input_grad->text), shown(first_bw->text)));
  // Older grammar: without any I, a B followed on its row by the W of its
  // stage and micro-batch is the input-gradient half.
  int older_b = 0;
  int older_bw = 0;
  for (int row = 0; row < num_ranks; ++row) {
    if (first_input_grad == nullptr) {
      std::set<std::pair<int, int>> later_w;
      for (auto cell = rows[row].rbegin(); cell != rows[row].rend(); ++cell) {
        for (Simple* action : {cell->second ? &*cell->second : nullptr, &cell->first}) {
          if (action == nullptr) continue;
          if (action->op == Op::W) later_w.emplace(action->stage, action->micro_batch);
          if (action->op == Op::B && later_w.count({action->stage, action->micro_batch}) != 0) {
            action->op = Op::I;
            ++older_b;
          }
        }
      }
    }
    for_each_action(rows[row], [&](Cell&, Simple& action) {
      if (action.op == Op::BW) {
        action.op = Op::B;
        ++older_bw;
      }
    });
  }

  // Stage -> rank, as PyTorch's _validate_schedule: from the compute actions.
  std::vector<int> rank_of(limits::kMaxStages, -1);
  std::vector<int> first_column(limits::kMaxStages, 0);
  int num_stages = 0;
  int micro_batches = 0;
  for (int row = 0; row < num_ranks; ++row) {
    for_each_action(rows[row], [&](Cell& cell, Simple& action) {
      if (!is_compute(action.op)) return;
      const int s = action.stage;
      if (rank_of[s] == -1) {
        rank_of[s] = row;
        first_column[s] = cell.column;
      } else if (rank_of[s] != row) {
        reader.fail_cell(row, cell.column,
                         fmt::format("expected each stage on one rank, found stage {} on rank {} (here, {}) and on rank {} "
                                     "(row {}, column {})",
                                     s, row, shown(cell.text), rank_of[s], rank_of[s] + 1, first_column[s]));
      }
      num_stages = std::max(num_stages, s + 1);
      micro_batches = std::max(micro_batches, action.micro_batch + 1);
    });
  }
  if (num_stages == 0) reader.fail_file("expected compute actions (F, I, B, W), found none");
  for (int s = 0; s < num_stages; ++s)
    if (rank_of[s] == -1)
      reader.fail_file(fmt::format("expected every stage 0..{} in some cell (the largest stage named is {}), found no "
                                   "action of stage {}",
                                   num_stages - 1, num_stages - 1, s));
  std::vector<std::vector<int>> stages_of(num_ranks);
  for (int s = 0; s < num_stages; ++s) stages_of[rank_of[s]].push_back(s);
  for (int row = 0; row < num_ranks; ++row)
    if (stages_of[row].empty())
      reader.fail_row(row, "expected at least one compute action (F, I, B, W) on every rank, found none");
  if (static_cast<long long>(num_stages) * micro_batches > limits::kMaxWorkItems)
    reader.fail_file(fmt::format("expected at most {} stages x micro-batches (docs/formats.md, Limits), found {} stages x {} "
                                 "micro-batches",
                                 limits::kMaxWorkItems, num_stages, micro_batches));

  // Order and uniqueness along each row.
  std::vector<Slot> slots(static_cast<std::size_t>(num_stages) * micro_batches);
  auto slot = [&](int s, int mb) -> Slot& { return slots[static_cast<std::size_t>(s) * micro_batches + mb]; };
  auto name = [](int s, char kind, int mb) { return fmt::format("{}{}{}", s, kind, mb); };
  for (int row = 0; row < num_ranks; ++row) {
    for_each_action(rows[row], [&](Cell& cell, Simple& action) {
      if (!is_compute(action.op)) return;
      Slot& at = slot(action.stage, action.micro_batch);
      const int s = action.stage;
      const int mb = action.micro_batch;
      auto fail = [&](const std::string& what) { reader.fail_cell(row, cell.column, what); };
      switch (action.op) {
        case Op::F:
          if (at.forward != 0)
            fail(fmt::format("expected one forward of stage {} micro-batch {}, found a second {} (the first at column {})",
                             s, mb, shown(cell.text), at.forward));
          at.forward = cell.column;
          break;
        case Op::B:
        case Op::I: {
          const char kind = action.op == Op::B ? 'B' : 'I';
          if (at.forward == 0)
            fail(fmt::format("expected {} earlier on this row (a backward follows its forward), found {} first",
                             name(s, 'F', mb), shown(cell.text)));
          if (at.gradient() != 0)
            fail(fmt::format("expected one backward of stage {} micro-batch {} (a B, or an I and a W), found a second, "
                             "{} (the first at column {})",
                             s, mb, shown(cell.text), at.gradient()));
          (kind == 'B' ? at.whole : at.input_grad) = cell.column;
          break;
        }
        case Op::W:
          if (at.weight != 0)
            fail(fmt::format("expected one W of stage {} micro-batch {}, found a second {} (the first at column {})", s,
                             mb, shown(cell.text), at.weight));
          if (at.input_grad == 0)
            fail(fmt::format("expected {} earlier on this row (a W follows its I), found {} first{}", name(s, 'I', mb),
                             shown(cell.text),
                             at.whole != 0 ? fmt::format("; {} at column {} is a whole backward", name(s, 'B', mb), at.whole)
                                           : std::string()));
          at.weight = cell.column;
          break;
        default:
          break;
      }
    });
  }

  // Counts per stage, as _validate_schedule: #F == m, #I == #W,
  // #B + (#I + #W) / 2 == m.
  for (int s = 0; s < num_stages; ++s) {
    int forwards = 0, inputs = 0, weights = 0, wholes = 0;
    for (int mb = 0; mb < micro_batches; ++mb) {
      const Slot& at = slot(s, mb);
      forwards += at.forward != 0;
      inputs += at.input_grad != 0;
      weights += at.weight != 0;
      wholes += at.whole != 0;
    }
    const std::string counts =
        fmt::format("stage {} has {} F, {} I, {} W, {} B for {} micro-batches", s, forwards, inputs, weights, wholes, micro_batches);
    for (int mb = 0; mb < micro_batches; ++mb) {
      const Slot& at = slot(s, mb);
      if (at.forward == 0)
        reader.fail_row(rank_of[s],
                        fmt::format("expected one F per micro-batch 0..{} of each stage (the largest micro-batch named is "
                                    "{}), found no {} ({})",
                                    micro_batches - 1, micro_batches - 1, name(s, 'F', mb), counts));
      if (at.input_grad != 0 && at.weight == 0)
        reader.fail_cell(rank_of[s], at.input_grad,
                         fmt::format("expected {} later on this row (as many W as I per stage), found none ({})",
                                     name(s, 'W', mb), counts));
      if (at.gradient() == 0)
        reader.fail_cell(rank_of[s], at.forward,
                         fmt::format("expected a backward of {} on this row ({} or {} and {}; #B + (#I+#W)/2 == "
                                     "micro-batches per stage), found none ({})",
                                     name(s, 'F', mb), name(s, 'B', mb), name(s, 'I', mb), name(s, 'W', mb), counts));
    }
  }

  // Communication: placed, matched, then dropped. Other ops: on their rank.
  int sends_f = 0, recvs_f = 0, sends_b = 0, recvs_b = 0, unshards = 0, reduces = 0;
  for (int row = 0; row < num_ranks; ++row) {
    for (Cell& cell : rows[row]) {
      const Simple& action = cell.first;
      if (is_compute(action.op)) continue;
      auto fail = [&](const std::string& what) { reader.fail_cell(row, cell.column, what); };
      const int s = action.stage;
      if (s >= num_stages || rank_of[s] != row)
        fail(fmt::format("expected {} on the rank of stage {}, found it on rank {} ({})", shown(cell.text), s, row,
                         s >= num_stages ? fmt::format("the stages are 0..{}", num_stages - 1)
                                         : fmt::format("stage {} lives on rank {}", s, rank_of[s])));
      if (!is_comm(action.op)) {
        (action.op == Op::ReduceGrad ? reduces : unshards) += 1;
        continue;
      }
      const int mb = action.micro_batch;
      if (mb >= micro_batches)
        fail(fmt::format("expected a micro-batch 0..{}, found {}", micro_batches - 1, shown(cell.text)));
      const bool forward = action.op == Op::SendF || action.op == Op::RecvF;
      const bool send = action.op == Op::SendF || action.op == Op::SendB;
      // The peer stage: the one this transfer comes from or goes to.
      const int peer = (forward == send) ? s + 1 : s - 1;
      if (peer < 0 || peer >= num_stages)
        fail(fmt::format("expected no {} of stage {} (the {} stage {} no {}), found {}", send ? "send" : "receive", s,
                         peer < 0 ? "first" : "last", send ? "sends" : "receives", forward ? "activation" : "gradient",
                         shown(cell.text)));
      if (rank_of[peer] == row)
        fail(fmt::format("expected no communication between stages {} and {}: both live on rank {}, found {}",
                         std::min(s, peer), std::max(s, peer), row, shown(cell.text)));
      Slot& at = slot(s, mb);
      const int compute = forward ? at.forward : at.gradient();
      const std::string compute_name = forward ? name(s, 'F', mb) : name(s, at.whole != 0 ? 'B' : 'I', mb);
      if (send && cell.column <= compute)
        fail(fmt::format("expected {} after {} (column {}), which produces what it sends, found it before", shown(cell.text),
                         compute_name, compute));
      if (!send && cell.column >= compute)
        fail(fmt::format("expected {} before {} (column {}), which needs what it receives, found it after",
                         shown(cell.text), compute_name, compute));
      int& placed = forward ? (send ? at.send_f : at.recv_f) : (send ? at.send_b : at.recv_b);
      if (placed != 0)
        fail(fmt::format("expected one {} per transfer, found a second (the first at column {})", shown(cell.text), placed));
      placed = cell.column;
      (forward ? (send ? sends_f : recvs_f) : (send ? sends_b : recvs_b)) += 1;
    }
  }
  const bool with_comms = sends_f + recvs_f + sends_b + recvs_b > 0;
  if (with_comms) {
    for (int s = 0; s + 1 < num_stages; ++s) {
      if (rank_of[s] == rank_of[s + 1]) continue;
      const int from = rank_of[s];
      const int to = rank_of[s + 1];
      for (int mb = 0; mb < micro_batches; ++mb) {
        const Slot& low = slot(s, mb);
        const Slot& high = slot(s + 1, mb);
        const char low_grad = low.whole != 0 ? 'B' : 'I';
        const char high_grad = high.whole != 0 ? 'B' : 'I';
        // The other half of the transfer, when it is there.
        auto unmatched = [&](int column, int rank, const std::string& what, const char* missing) {
          return column != 0 ? fmt::format(" (the {} at row {}, column {} has no matching {})", what, rank + 1, column, missing)
                             : std::string();
        };
        if (low.send_f == 0)
          reader.fail_cell(from, low.forward,
                           fmt::format("expected {}SEND_F{} after {} on this row (stage {} lives on rank {}), found none{}", s,
                                       mb, name(s, 'F', mb), s + 1, to, unmatched(high.recv_f, to, fmt::format("{}RECV_F{}", s + 1, mb), "send")));
        if (high.recv_f == 0)
          reader.fail_cell(to, high.forward,
                           fmt::format("expected {}RECV_F{} before {} on this row (stage {} lives on rank {}), found none{}",
                                       s + 1, mb, name(s + 1, 'F', mb), s, from, unmatched(low.send_f, from, fmt::format("{}SEND_F{}", s, mb), "receive")));
        if (high.send_b == 0)
          reader.fail_cell(to, high.gradient(),
                           fmt::format("expected {}SEND_B{} after {} on this row (stage {} lives on rank {}), found none{}",
                                       s + 1, mb, name(s + 1, high_grad, mb), s, from, unmatched(low.recv_b, from, fmt::format("{}RECV_B{}", s, mb), "send")));
        if (low.recv_b == 0)
          reader.fail_cell(from, low.gradient(),
                           fmt::format("expected {}RECV_B{} before {} on this row (stage {} lives on rank {}), found none{}",
                                       s, mb, name(s, low_grad, mb), s + 1, to, unmatched(high.send_b, to, fmt::format("{}SEND_B{}", s + 1, mb), "receive")));
      }
    }
  }

  TorchCsvImport result;
  Program& program = result.program;
  program.num_stages = num_stages;
  program.micro_batches = micro_batches;
  program.mini_batches = 1;
  for (int row = 0; row < num_ranks; ++row) {
    DeviceProgram device;
    device.stages = stages_of[row];
    device.replica = 0;
    Stream stream;
    auto to_action = [](const Simple& simple) {
      Action action;
      action.kind = simple.op == Op::F   ? ActionKind::Forward
                    : simple.op == Op::B ? ActionKind::Backward
                    : simple.op == Op::I ? ActionKind::BackwardInput
                                         : ActionKind::BackwardWeight;
      action.stage = simple.stage;
      action.micro_batch = simple.micro_batch;
      return action;
    };
    for (const Cell& cell : rows[row]) {
      if (!is_compute(cell.first.op)) continue;
      if (cell.second) stream.overlapped.push_back(stream.actions.size());
      stream.actions.push_back(to_action(cell.first));
      if (cell.second) stream.actions.push_back(to_action(*cell.second));
    }
    device.streams.push_back(std::move(stream));
    program.devices.push_back(std::move(device));
  }

  auto& notes = result.notes;
  if (empty_cells > 0) notes.push_back(fmt::format("{} empty cells (idle steps) dropped", empty_cells));
  if (older_b > 0)
    notes.push_back(fmt::format("older grammar: B read as the input-gradient half (I) for {} actions, each followed on its "
                                "row by the W of its stage and micro-batch",
                                older_b));
  if (older_bw > 0) notes.push_back(fmt::format("older grammar: BW read as a whole backward (B) for {} actions", older_bw));
  if (with_comms)
    notes.push_back(fmt::format("{} SEND_F, {} RECV_F, {} SEND_B, {} RECV_B checked and dropped (the simulation's own "
                                "transfers apply)",
                                sends_f, recvs_f, sends_b, recvs_b));
  if (unshards > 0) notes.push_back(fmt::format("{} UNSHARD/RESHARD ignored", unshards));
  if (reduces > 0) notes.push_back(fmt::format("{} REDUCE_GRAD dropped (the Program has no replicas)", reduces));
  return result;
}

namespace {

std::string torch_cell(const Action& action) {
  char kind = '?';
  switch (action.kind) {
    case ActionKind::Forward: kind = 'F'; break;
    case ActionKind::Backward: kind = 'B'; break;
    case ActionKind::BackwardInput: kind = 'I'; break;
    case ActionKind::BackwardWeight: kind = 'W'; break;
    case ActionKind::Recompute: kind = 'R'; break;
  }
  return fmt::format("{}{}{}", action.stage, kind, action.micro_batch);
}

}  // namespace

std::string program_to_torch_csv(const Program& program) {
  auto fail = [](const std::string& why) {
    throw InputError("cannot write the Program as a PyTorch pipelining CSV: " + why);
  };
  if (program.mini_batches != 1)
    fail(fmt::format("it has {} mini-batches, expected 1 (the format holds one)", program.mini_batches));
  if (program.num_stages <= 0 || program.num_stages > limits::kMaxStages)
    fail(fmt::format("expected 1..{} stages, found {}", limits::kMaxStages, program.num_stages));
  if (program.micro_batches <= 0) fail(fmt::format("expected at least one micro-batch, found {}", program.micro_batches));
  if (!program.extra_dependencies.empty())
    fail(fmt::format("it has {} extra dependencies (the format has none)", program.extra_dependencies.size()));
  if (!program.all_reduces.empty())
    fail(fmt::format("it has {} all-reduces (the format has no replicas)", program.all_reduces.size()));
  std::vector<int> device_of(program.num_stages, -1);
  for (std::size_t d = 0; d < program.devices.size(); ++d) {
    const DeviceProgram& device = program.devices[d];
    if (device.replica != 0)
      fail(fmt::format("device {} holds replica {} (the format has no replicas)", d, device.replica));
    if (device.stages.empty()) fail(fmt::format("device {} holds no stage", d));
    for (const int s : device.stages) {
      if (s < 0 || s >= program.num_stages)
        fail(fmt::format("device {} holds stage {}, expected 0..{}", d, s, program.num_stages - 1));
      if (device_of[s] != -1)
        fail(fmt::format("stage {} is held by devices {} and {} (the format holds each stage on one rank)", s,
                         device_of[s], d));
      device_of[s] = static_cast<int>(d);
    }
    if (device.streams.size() != 1)
      fail(fmt::format("device {} has {} streams, expected 1 (a row is one ordered list)", d, device.streams.size()));
    const Stream& stream = device.streams.front();
    if (stream.actions.empty()) fail(fmt::format("device {} has no action (its row would be empty)", d));
    for (const Action& action : stream.actions) {
      const std::string shown_action = torch_cell(action);
      if (action.kind == ActionKind::Recompute)
        fail(fmt::format("device {} runs {}, a recompute (R), which the format cannot write", d, shown_action));
      if (action.mini_batch != 0)
        fail(fmt::format("device {} runs {} of mini-batch {} (the format holds one mini-batch)", d, shown_action,
                         action.mini_batch));
      if (std::find(device.stages.begin(), device.stages.end(), action.stage) == device.stages.end())
        fail(fmt::format("device {} runs {}, of a stage it does not hold", d, shown_action));
      if (action.micro_batch < 0 || action.micro_batch >= program.micro_batches)
        fail(fmt::format("device {} runs {}, expected micro-batches 0..{}", d, shown_action, program.micro_batches - 1));
    }
    for (std::size_t k = 0; k < stream.overlapped.size(); ++k) {
      const std::size_t i = stream.overlapped[k];
      if (i + 1 >= stream.actions.size() || (k > 0 && i <= stream.overlapped[k - 1] + 1))
        fail(fmt::format("device {} has overlapped position {}, expected ascending positions below {} that do not chain", d,
                         i, stream.actions.size() - 1));
      const ActionKind a = stream.actions[i].kind;
      const ActionKind b = stream.actions[i + 1].kind;
      if (!((a == ActionKind::Forward && is_input_gradient(b)) || (b == ActionKind::Forward && is_input_gradient(a))))
        fail(fmt::format("device {} overlaps {} and {}, expected one F and one B or I", d, torch_cell(stream.actions[i]),
                         torch_cell(stream.actions[i + 1])));
    }
  }
  for (int s = 0; s < program.num_stages; ++s)
    if (device_of[s] == -1) fail(fmt::format("stage {} is held by no device", s));

  std::string out;
  for (const DeviceProgram& device : program.devices) {
    const Stream& stream = device.streams.front();
    std::size_t next_pair = 0;
    for (std::size_t i = 0; i < stream.actions.size(); ++i) {
      if (i > 0) out += ',';
      if (next_pair < stream.overlapped.size() && stream.overlapped[next_pair] == i) {
        out += fmt::format("({};{})OVERLAP_F_B", torch_cell(stream.actions[i]), torch_cell(stream.actions[i + 1]));
        ++i;
        ++next_pair;
      } else {
        out += torch_cell(stream.actions[i]);
      }
    }
    out += '\n';
  }
  return out;
}

Program read_program_file(const std::string& path, const std::string& format, std::vector<std::string>* notes) {
  Program program;
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored))
    throw InputError(fmt::format("{}: is a folder; expected a Program file ({})", printable(path),
                                 format == "torch-csv" ? "PyTorch's CSV, --program-format torch-csv" : "pipegrid's text form"));
  if (format == "text") {
    program = parse_program_text(read_text_file(path), path);
  } else if (format == "torch-csv") {
    TorchCsvImport imported = parse_torch_csv(read_text_file(path), path);
    program = std::move(imported.program);
    if (notes) *notes = std::move(imported.notes);
  } else {
    throw InputError(fmt::format("--program-format: expected text or torch-csv, found '{}'", printable(format)));
  }
  try {
    validate_program(program);
  } catch (const ProgramError& error) {
    throw InputError(fmt::format("{}: {}", path, error.what()));
  }
  return program;
}

}  // namespace pipegrid
