#include "sweep/results.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/io.hpp"
#include "sweep/csv.hpp"

namespace pipegrid::sweep {

namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kRunPrefix = {"run_key", "run_index", "label"};

std::string cell_of(const nlohmann::json& value) {
  if (value.is_null()) return "";
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_number_integer()) return std::to_string(value.get<long long>());
  if (value.is_number()) return format_number(value.get<double>());
  if (value.is_string()) return value.get<std::string>();
  return value.dump();
}

/// "0-14:3|15-39:1": layers and replicas per stage, from a list of stages
/// that give their replicas as a count (partition --json) or as their hosts
/// (simulate --json's partition).
std::string compact_partition(const nlohmann::json& stages) {
  std::string text;
  if (!stages.is_array()) return text;
  for (const nlohmann::json& stage : stages) {
    const nlohmann::json layers = stage.value("layers", nlohmann::json::array());
    const std::string range = layers.size() == 2 ? fmt::format("{}-{}", cell_of(layers[0]), cell_of(layers[1])) : layers.dump();
    const std::string replicas =
        stage.contains("replicas") ? cell_of(stage["replicas"]) : std::to_string(stage.value("hosts", nlohmann::json::array()).size());
    text += (text.empty() ? "" : "|") + range + ":" + replicas;
  }
  return text;
}

void write_all(int fd, const std::string& text, const std::string& path) {
  // One write() per line: a kill leaves whole lines or a torn last one.
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw InputError(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
    }
    done += static_cast<std::size_t>(n);
  }
}

/// The whole lines of a journal: everything up to its last line break.
/// A journal's records never hold a line break (Journal::append), so what
/// follows the last one is a record a kill tore in the middle of its write.
std::string_view whole_lines(std::string_view text) {
  const std::size_t last = text.rfind('\n');
  return last == std::string_view::npos ? std::string_view() : text.substr(0, last + 1);
}

/// InputError naming the journal and the first column of its header that
/// differs from `expected` (the columns `expected_from` names).
void check_header(const std::string& path, const std::vector<std::string>& found, const std::vector<std::string>& expected,
                  const std::string& expected_from) {
  if (found == expected) return;
  const std::string hint = "; the journal was written for another plan or edited: give `sweep run` another --out, or --fresh "
                           "to run every run again";
  for (std::size_t i = 0;; ++i) {
    if (i >= found.size())
      throw InputError(fmt::format("{}:1: the header ends after {} columns, before column {} '{}' of {}{}", path, found.size(),
                                   i + 1, expected[i], expected_from, hint));
    if (i >= expected.size())
      throw InputError(fmt::format("{}:1: header column {} '{}' is one too many: {} end with '{}'{}", path, i + 1, found[i],
                                   expected_from, expected.empty() ? "" : expected.back(), hint));
    if (found[i] != expected[i])
      throw InputError(fmt::format("{}:1: header column {} is '{}', expected '{}' (as in {}){}", path, i + 1, found[i], expected[i],
                                   expected_from, hint));
  }
}

/// Opens a journal for appending, cutting a torn last line and writing the
/// header into a new or empty file; InputError when an existing journal's
/// header is not `header`.
int open_journal(const std::string& path, const std::vector<std::string>& header, const std::string& header_from) {
  std::string existing;
  if (fs::exists(path)) {
    existing = read_text_file(path);
    const std::string_view whole = whole_lines(existing);
    if (!whole.empty()) {
      const std::string_view first_line = whole.substr(0, whole.find('\n') + 1);
      check_header(path, parse_csv(first_line, path).header, header, header_from);
    }
    if (whole.size() != existing.size()) fs::resize_file(path, whole.size());
    existing.resize(whole.size());
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError(fmt::format("{}: cannot open for appending: {}", path, std::strerror(errno)));
  if (existing.empty()) write_all(fd, csv_record(header), path);
  return fd;
}

bool is_volatile(const std::string& column) {
  const auto& columns = volatile_columns();
  return std::find(columns.begin(), columns.end(), column) != columns.end();
}

/// A row's result by column name: status, reason and the metrics, not the
/// volatile columns (the determinism check). Parameters and labels are the
/// plan's: two runs of one key may differ only in their labels.
std::map<std::string, std::string> stable_cells(const std::vector<std::string>& header, const std::vector<std::string>& row) {
  std::map<std::string, std::string> cells;
  const auto status = std::find(header.begin(), header.end(), "status");
  for (auto i = static_cast<std::size_t>(status - header.begin()); i < header.size() && i < row.size(); ++i)
    if (!is_volatile(header[i])) cells[header[i]] = row[i];
  return cells;
}

}  // namespace

const std::vector<std::string>& run_statuses() {
  static const std::vector<std::string> statuses = {"ok", "oom", "infeasible", "error", "timeout", "crashed"};
  return statuses;
}

bool is_failed_status(const std::string& status) { return status == "error" || status == "crashed" || status == "timeout"; }

std::optional<std::string> out_of_memory_reason(const std::vector<DeviceMetrics>& devices) {
  for (const DeviceMetrics& device : devices) {
    if (!device.oom) continue;
    const double reserve = device.memory_reserve_bytes;
    return fmt::format("{} needs {} of {}{}", device.host, human_bytes(device.peak_memory_bytes),
                       human_bytes(device.memory_capacity_bytes.value_or(0.0) - reserve),
                       reserve > 0 ? fmt::format(" ({} held in reserve)", human_bytes(reserve)) : "");
  }
  return std::nullopt;
}

const std::vector<std::string>& metric_columns(const std::string& command) {
  static const std::vector<std::string> simulate = {
      "minibatch_time_s", "steady_period_s",       "throughput_samples_per_s", "bubble_fraction", "bytes_per_sample",
      "peak_memory_bytes", "peak_memory_host", "memory_capacity_bytes", "stages", "partition",
      "tflops_per_gpu",   "mfu",             "hfu",
      // present only with expert parallelism (docs/semantics.md, Expert parallelism); empty otherwise
      "all_to_all_s_per_device", "all_to_all_exposed_s_per_device", "fb_overlap_effective"};
  static const std::vector<std::string> partition = {"time_per_stage_s", "stages", "partition"};
  static const std::vector<std::string> model = {"parameters", "total_flops"};
  if (command == "partition") return partition;
  if (command == "model") return model;
  return simulate;
}

const std::vector<std::string>& volatile_columns() {
  static const std::vector<std::string> columns = {"sim_wall_s", "shard", "finished_at", "pipegrid_version"};
  return columns;
}

const std::vector<std::string>& devices_columns() {
  static const std::vector<std::string> columns = {"run_key", "host", "stages", "replica", "busy_s", "bubble_fraction",
                                                   "peak_memory_bytes", "memory_capacity_bytes", "peak_stashed", "weight_versions"};
  return columns;
}

std::vector<std::string> metric_header(const ExperimentPlan& plan) {
  std::vector<std::string> header;
  for (const std::string& metric : metric_columns(plan.command)) {
    const bool taken = std::find(plan.columns.begin(), plan.columns.end(), metric) != plan.columns.end();
    header.push_back(taken ? metric + "_result" : metric);
  }
  return header;
}

std::vector<std::string> runs_header(const ExperimentPlan& plan) {
  std::vector<std::string> header = kRunPrefix;
  header.insert(header.end(), plan.columns.begin(), plan.columns.end());
  header.push_back("status");
  header.push_back("reason");
  const std::vector<std::string> metrics = metric_header(plan);
  header.insert(header.end(), metrics.begin(), metrics.end());
  header.insert(header.end(), volatile_columns().begin(), volatile_columns().end());
  return header;
}

namespace {

std::vector<std::string> reserved_columns() {
  std::vector<std::string> names = kRunPrefix;
  const auto add = [&](const std::string& name) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  };
  add("status");
  add("reason");
  for (const std::string& name : volatile_columns()) add(name);
  for (const std::string& name : devices_columns()) add(name);
  for (const char* command : {"simulate", "partition", "model"})
    for (const std::string& name : metric_columns(command)) add(name);
  return names;
}

}  // namespace

bool is_reserved_column(const std::string& name) {
  static const std::vector<std::string> names = reserved_columns();
  if (std::find(names.begin(), names.end(), name) != names.end()) return true;
  const std::string suffix = "_result";
  if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
  const std::string metric = name.substr(0, name.size() - suffix.size());
  for (const char* command : {"simulate", "partition", "model"}) {
    const auto& metrics = metric_columns(command);
    if (std::find(metrics.begin(), metrics.end(), metric) != metrics.end()) return true;
  }
  return false;
}

std::string reserved_column_list() {
  std::string list;
  for (const std::string& name : reserved_columns()) list += (list.empty() ? "" : ", ") + name;
  return list + ", or a metric's name with '_result'";
}

ParsedMetrics parse_metrics(const std::string& command, const std::string& json_text) {
  ParsedMetrics parsed;
  const auto& columns = metric_columns(command);
  parsed.cells.assign(columns.size(), "");
  if (json_text.empty()) return parsed;
  const nlohmann::json document = nlohmann::json::parse(json_text);
  if (command == "partition") {
    // partition --json: the stages at the top level, each with its layers and replicas.
    parsed.cells[0] = cell_of(document.value("time_per_stage_s", nlohmann::json()));
    const nlohmann::json stages = document.value("stages", nlohmann::json::array());
    parsed.cells[1] = std::to_string(stages.size());
    parsed.cells[2] = compact_partition(stages);
    return parsed;
  }
  if (command == "model") {
    parsed.cells[0] = cell_of(document.value("parameters", nlohmann::json()));
    parsed.cells[1] = cell_of(document.value("total_flops", nlohmann::json()));
    return parsed;
  }
  const auto set = [&](const std::string& column, const std::string& value) {
    parsed.cells[static_cast<std::size_t>(std::find(columns.begin(), columns.end(), column) - columns.begin())] = value;
  };
  for (const char* key : {"minibatch_time_s", "throughput_samples_per_s", "bubble_fraction", "bytes_per_sample", "stages",
                          "tflops_per_gpu", "mfu", "hfu", "all_to_all_s_per_device", "all_to_all_exposed_s_per_device",
                          "fb_overlap_effective"})
    if (document.contains(key)) set(key, cell_of(document[key]));
  if (document.contains("steady_state") && document["steady_state"].is_object())
    set("steady_period_s", cell_of(document["steady_state"].value("period_s", nlohmann::json())));
  if (document.contains("partition") && document["partition"].is_object())
    set("partition", compact_partition(document["partition"].value("stages", nlohmann::json::array())));
  // The device with the highest peak (the first one on a tie).
  const nlohmann::json* peak = nullptr;
  std::map<std::string, std::pair<int, int>> placement;  // host -> stage, replica
  if (document.contains("partition") && document["partition"].contains("stages")) {
    const auto& stages = document["partition"]["stages"];
    for (std::size_t s = 0; s < stages.size(); ++s)
      for (std::size_t r = 0; r < stages[s]["hosts"].size(); ++r)
        placement[stages[s]["hosts"][r].get<std::string>()] = {static_cast<int>(s), static_cast<int>(r)};
  }
  const nlohmann::json devices = document.value("devices", nlohmann::json::array());
  for (const nlohmann::json& device : devices) {
    if (!peak || device.value("peak_memory_bytes", 0.0) > peak->value("peak_memory_bytes", 0.0)) peak = &device;
    const std::string host = device.value("host", "");
    std::string stages;
    if (device.contains("stages"))
      for (const auto& stage : device["stages"]) stages += (stages.empty() ? "" : ";") + cell_of(stage);
    else if (device.contains("stage"))
      stages = cell_of(device["stage"]);
    const auto found = placement.find(host);
    parsed.devices.push_back({host, stages, found == placement.end() ? "" : std::to_string(found->second.second),
                              cell_of(device.value("busy_s", nlohmann::json())),
                              cell_of(device.value("bubble_fraction", nlohmann::json())),
                              cell_of(device.value("peak_memory_bytes", nlohmann::json())),
                              cell_of(device.value("memory_capacity_bytes", nlohmann::json())),
                              cell_of(device.value("peak_stashed_microbatches", nlohmann::json())),
                              cell_of(device.value("peak_weight_versions", nlohmann::json()))});
  }
  if (peak) {
    set("peak_memory_bytes", cell_of(peak->value("peak_memory_bytes", nlohmann::json())));
    set("peak_memory_host", peak->value("host", ""));
    set("memory_capacity_bytes", cell_of(peak->value("memory_capacity_bytes", nlohmann::json())));
  }
  return parsed;
}

RunRows rows_of(const ExperimentPlan& plan, const PlannedRun& run, const RunOutcome& outcome, const Shard& shard,
                const std::string& finished_at, const std::string& version) {
  RunRows rows;
  rows.run = {run.key, std::to_string(run.run_index), run.label};
  for (const std::string& column : plan.columns) {
    const auto found = run.settings.find(column);
    rows.run.push_back(found == run.settings.end() ? "" : found->second.value.to_text());
  }
  rows.run.push_back(outcome.status);
  std::string reason = outcome.reason;
  std::replace(reason.begin(), reason.end(), '\n', ' ');
  std::replace(reason.begin(), reason.end(), '\r', ' ');
  rows.run.push_back(reason);
  ParsedMetrics metrics;
  try {
    metrics = parse_metrics(plan.command, outcome.json);
  } catch (const nlohmann::json::exception& error) {
    throw std::runtime_error(fmt::format("run {}: unreadable result JSON: {}", run.label, error.what()));
  }
  rows.run.insert(rows.run.end(), metrics.cells.begin(), metrics.cells.end());
  rows.run.push_back(fmt::format("{:.3f}", outcome.wall_s));
  rows.run.push_back(fmt::format("{}/{}", shard.index, shard.count));
  rows.run.push_back(finished_at);
  rows.run.push_back(version);
  for (auto& device : metrics.devices) {
    device.insert(device.begin(), run.key);
    rows.devices.push_back(std::move(device));
  }
  return rows;
}

namespace {

std::string status_list() {
  std::string list;
  for (const std::string& status : run_statuses()) list += (list.empty() ? "" : ", ") + status;
  return list;
}

/// The metric columns of `command` that hold a number (not a host name or
/// a partition); each is a count, a time, a size or a fraction: never negative.
bool is_numeric_metric(const std::string& command, const std::string& metric) {
  return !(command == "simulate" && (metric == "peak_memory_host" || metric == "partition")) &&
         !(command == "partition" && metric == "partition");
}

/// Whether a journal cell holds what a number column may: nothing, or a
/// number (the spellings format_number writes, `inf` and `nan` included)
/// that is not negative.
bool is_non_negative_number_cell(const std::string& cell) {
  if (cell.empty()) return true;
  char* end = nullptr;
  const double value = std::strtod(cell.c_str(), &end);
  if (end != cell.c_str() + cell.size()) return false;
  return std::isnan(value) || !(value < 0);
}

std::size_t line_count(std::string_view text) { return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')); }

/// A journal's text without its torn last line; notes the cut line.
std::string journal_text(const fs::path& path, std::vector<std::string>& notes) {
  std::string text = read_text_file(path.string());
  const std::size_t whole = whole_lines(text).size();
  if (whole != text.size()) {
    notes.push_back(fmt::format("{}:{}: a torn last line (no line break at its end: a run stopped in the middle of writing "
                                "it) is ignored; `sweep run` cuts it off and runs that run again",
                                path.string(), line_count(text.substr(0, whole)) + 1));
    text.resize(whole);
  }
  return text;
}

/// A journal's whole lines parsed, its header checked first (a header
/// with a column more or less is named as such, not as a short row).
CsvTable parse_journal(const std::string& text, const std::string& path, const std::vector<std::string>& expected,
                       const std::string& expected_from) {
  check_header(path, parse_csv(std::string_view(text).substr(0, text.find('\n') + 1), path).header, expected, expected_from);
  return parse_csv(text, path);
}

void check_run_rows(const CsvTable& table, const std::string& command) {
  const std::size_t status = table.require_column("status");
  const auto& metrics = metric_columns(command);
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    const auto& row = table.rows[r];
    if (std::find(run_statuses().begin(), run_statuses().end(), row[status]) == run_statuses().end())
      throw InputError(fmt::format("{}:{}: status '{}' is not one of {}", table.file, table.row_lines[r], row[status], status_list()));
    for (std::size_t m = 0; m < metrics.size(); ++m) {
      const std::size_t column = status + 2 + m;
      if (column < row.size() && is_numeric_metric(command, metrics[m]) && !is_non_negative_number_cell(row[column]))
        throw InputError(fmt::format("{}:{}: {}: expected a number that is not negative (or nothing), found '{}'", table.file,
                                     table.row_lines[r], table.header[column], row[column]));
    }
  }
}

void check_device_rows(const CsvTable& table) {
  for (std::size_t r = 0; r < table.rows.size(); ++r)
    for (std::size_t c = 0; c < table.header.size(); ++c) {
      const std::string& name = table.header[c];
      if (name == "run_key" || name == "host" || name == "stages") continue;
      if (!is_non_negative_number_cell(table.rows[r][c]))
        throw InputError(fmt::format("{}:{}: {}: expected a number that is not negative (or nothing), found '{}'", table.file,
                                     table.row_lines[r], name, table.rows[r][c]));
    }
}

/// Whether a run with this status wrote device rows (simulate's ok and oom
/// runs: every metric is kept).
bool has_device_rows(const std::string& command, const std::string& status) {
  return command == "simulate" && (status == "ok" || status == "oom");
}

}  // namespace

RecordedRuns read_recorded_runs(const std::string& dir, const std::vector<std::string>& runs_header, const std::string& command,
                                const std::string& header_from) {
  RecordedRuns recorded;
  recorded.header = runs_header;
  const fs::path shards = fs::path(dir) / "shards";
  if (!fs::is_directory(shards)) return recorded;
  std::vector<fs::path> run_files, device_files;
  for (const auto& entry : fs::directory_iterator(shards)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("shard-", 0) == 0 && entry.path().extension() == ".csv") run_files.push_back(entry.path());
    if (name.rfind("devices-", 0) == 0 && entry.path().extension() == ".csv") device_files.push_back(entry.path());
  }
  std::sort(run_files.begin(), run_files.end());
  std::sort(device_files.begin(), device_files.end());
  // Run journals first: a shard running beside this one appends a run's
  // devices before its run row, so every run row read here has its devices
  // in the device journals read after.
  const std::size_t status_column =
      static_cast<std::size_t>(std::find(runs_header.begin(), runs_header.end(), "status") - runs_header.begin());
  std::map<std::string, std::string> file_of_key;
  for (const fs::path& path : run_files) {
    const std::string text = journal_text(path, recorded.notes);
    if (text.empty()) continue;
    const CsvTable table = parse_journal(text, path.string(), runs_header, header_from);
    check_run_rows(table, command);
    for (const auto& row : table.rows) {
      const std::string& key = row[0];
      if (const auto existing = recorded.runs.find(key); existing != recorded.runs.end()) {
        if (stable_cells(runs_header, existing->second) != stable_cells(runs_header, row) &&
            std::find(recorded.conflicts.begin(), recorded.conflicts.end(), key) == recorded.conflicts.end())
          recorded.conflicts.push_back(key);
        continue;
      }
      recorded.runs[key] = row;
      file_of_key[key] = path.string();
    }
  }
  // Device rows of runs whose run row was never written are dropped.
  for (const fs::path& path : device_files) {
    const std::string text = journal_text(path, recorded.notes);
    if (text.empty()) continue;
    const CsvTable table = parse_journal(text, path.string(), devices_columns(), "the columns of devices.csv");
    check_device_rows(table);
    std::map<std::string, std::vector<std::vector<std::string>>> in_file;
    for (const auto& row : table.rows)
      if (recorded.runs.count(row[0])) in_file[row[0]].push_back(row);
    for (auto& [key, rows] : in_file) recorded.devices[key] = std::move(rows);
  }
  // A run recorded as simulated without its devices lost them: it counts
  // as not run, and runs again.
  std::vector<std::string> without_devices;
  for (auto run = recorded.runs.begin(); run != recorded.runs.end();) {
    if (has_device_rows(command, run->second[status_column]) && !recorded.devices.count(run->first)) {
      without_devices.push_back(fmt::format("{} ({}, in {})", run->first, run->second[2], file_of_key[run->first]));
      run = recorded.runs.erase(run);
    } else {
      ++run;
    }
  }
  if (!without_devices.empty()) {
    std::string list;
    for (const std::string& run : without_devices) list += "\n  " + run;
    recorded.notes.push_back(fmt::format(
        "{}/shards: {} run{} recorded as simulated {} no device rows in any devices-*.csv journal (rows lost): {} as not run, "
        "and `sweep run` runs {} again:{}",
        dir, without_devices.size(), without_devices.size() == 1 ? "" : "s", without_devices.size() == 1 ? "has" : "have",
        without_devices.size() == 1 ? "it counts" : "they count", without_devices.size() == 1 ? "it" : "them", list));
  }
  return recorded;
}

namespace {

/// Drops the device rows of runs that have no run row in the shard's run
/// journal: a run killed between its two writes (devices first), or whose
/// run row was torn, is run again and appends its devices again.
void drop_orphan_device_rows(const std::string& devices_path, const std::string& runs_path) {
  if (!fs::exists(devices_path)) return;
  const std::string text = read_text_file(devices_path);
  const std::string_view whole = whole_lines(text);
  if (whole.empty()) return;
  std::set<std::string> keys;
  if (fs::exists(runs_path)) {
    const std::string runs_text = read_text_file(runs_path);
    const std::string_view runs_whole = whole_lines(runs_text);
    if (!runs_whole.empty()) {
      const CsvTable runs = parse_csv(runs_whole, runs_path);
      const std::size_t key = runs.require_column("run_key");
      for (const auto& row : runs.rows) keys.insert(row[key]);
    }
  }
  const CsvTable devices = parse_csv(whole, devices_path);
  std::string kept = csv_record(devices.header);
  bool dropped = false;
  for (const auto& row : devices.rows) {
    if (keys.count(row[0])) kept += csv_record(row);
    else dropped = true;
  }
  if (dropped) write_file_atomically(devices_path, kept);
}

}  // namespace

Journal::Journal(const std::string& dir, const Shard& shard, const std::vector<std::string>& runs_header) {
  const fs::path shards = fs::path(dir) / "shards";
  std::error_code error;
  fs::create_directories(shards, error);
  if (error) throw InputError(fmt::format("{}: cannot create: {}", shards.string(), error.message()));
  runs_path_ = (shards / fmt::format("shard-{}-of-{}.csv", shard.index, shard.count)).string();
  const std::string devices_path = (shards / fmt::format("devices-{}-of-{}.csv", shard.index, shard.count)).string();
  runs_fd_ = open_journal(runs_path_, runs_header, "the columns of this plan");
  drop_orphan_device_rows(devices_path, runs_path_);
  devices_fd_ = open_journal(devices_path, devices_columns(), "the columns of devices.csv");
}

Journal::~Journal() {
  if (runs_fd_ >= 0) ::close(runs_fd_);
  if (devices_fd_ >= 0) ::close(devices_fd_);
}

namespace {

/// A journal record: its cells with every line break made a space, so that
/// each record is one line and a torn one is the text after the last.
std::string journal_record(std::vector<std::string> cells) {
  for (std::string& cell : cells) std::replace_if(cell.begin(), cell.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return csv_record(cells);
}

}  // namespace

void Journal::append(const RunRows& rows) {
  std::string devices;
  for (const auto& row : rows.devices) devices += journal_record(row);
  if (!devices.empty()) write_all(devices_fd_, devices, runs_path_);
  write_all(runs_fd_, journal_record(rows.run), runs_path_);
}

namespace {

nlohmann::json read_manifest(const std::string& dir) {
  const fs::path manifest_path = fs::path(dir) / "manifest.json";
  if (!fs::exists(manifest_path))
    throw InputError(fmt::format("{}: no manifest.json: not the output folder of `pipegrid sweep run`", dir));
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(read_text_file(manifest_path.string()));
  } catch (const nlohmann::json::exception& error) {
    throw InputError(fmt::format("{}: not valid JSON: {}", manifest_path.string(), error.what()));
  }
  const auto columns = manifest.find("columns");
  if (!manifest.is_object() || columns == manifest.end() || !columns->is_array() ||
      !std::all_of(columns->begin(), columns->end(), [](const nlohmann::json& name) { return name.is_string(); }))
    throw InputError(fmt::format("{}: no \"columns\" list of names: not a manifest of `pipegrid sweep run`", manifest_path.string()));
  return manifest;
}

RecordedRuns recorded_runs_of(const std::string& dir, const nlohmann::json& manifest) {
  const std::string command = manifest.contains("command") && manifest["command"].is_string() ? manifest["command"].get<std::string>() : "simulate";
  return read_recorded_runs(dir, manifest.at("columns").get<std::vector<std::string>>(), command,
                            fmt::format("the columns of {}", (fs::path(dir) / "manifest.json").string()));
}

}  // namespace

RecordedRuns read_recorded_runs(const std::string& dir) { return recorded_runs_of(dir, read_manifest(dir)); }

std::string recorded_status(const RecordedRuns& recorded, const std::string& key) {
  const auto status_column = std::find(recorded.header.begin(), recorded.header.end(), "status");
  const auto found = recorded.runs.find(key);
  if (found == recorded.runs.end() || status_column == recorded.header.end()) return "";
  return found->second[static_cast<std::size_t>(status_column - recorded.header.begin())];
}

RunsToDo runs_to_do(const std::vector<PlannedRun>& selected, const RecordedRuns& recorded, bool retry_failed) {
  RunsToDo todo;
  std::set<std::string> keys_to_run;
  for (const PlannedRun& run : selected) {
    const std::string status = recorded_status(recorded, run.key);
    if (!status.empty() && !(retry_failed && is_failed_status(status))) {
      ++todo.resumed;
      continue;
    }
    if (keys_to_run.insert(run.key).second) todo.runs.push_back(&run);
  }
  return todo;
}

void StatusCounts::add(const std::string& status) {
  if (status.empty()) ++not_run;
  else ++by_status[status];
  if (is_failed_status(status)) ++failed;
}

MergeResult merge_results(const std::string& dir) {
  const nlohmann::json manifest = read_manifest(dir);
  const RecordedRuns recorded = recorded_runs_of(dir, manifest);
  if (!recorded.conflicts.empty()) {
    std::string keys;
    for (const std::string& key : recorded.conflicts) keys += (keys.empty() ? "" : ", ") + key;
    throw InputError(fmt::format("{}: run key{} {} recorded with two different results: the simulation is not "
                                 "deterministic, or shards ran different pipegrid versions (compare their rows in {}/shards)",
                                 dir, recorded.conflicts.size() == 1 ? "" : "s", keys, dir));
  }
  std::vector<std::string> header = manifest.at("columns").get<std::vector<std::string>>();
  // header index -> index in each run's "cells" (the plan's parameter and label columns)
  std::vector<std::optional<std::size_t>> plan_cell(header.size());
  if (manifest.contains("plan_columns")) {
    const auto plan_columns = manifest.at("plan_columns").get<std::vector<std::string>>();
    for (std::size_t i = 0; i < header.size(); ++i)
      for (std::size_t c = 0; c < plan_columns.size(); ++c)
        if (header[i] == plan_columns[c]) plan_cell[i] = c;
  }
  std::string runs = csv_record(header), devices = csv_record(devices_columns());
  MergeResult result;
  result.notes = recorded.notes;
  for (const nlohmann::json& run : manifest.at("plan")) {
    const std::string key = run.at("key");
    const auto found = recorded.runs.find(key);
    if (found == recorded.runs.end()) {
      result.missing_labels.push_back(fmt::format("{} ({})", run.at("label").get<std::string>(), key));
      continue;
    }
    // The journal row, in the manifest's columns, index and label of this plan.
    std::vector<std::string> row(header.size());
    for (std::size_t i = 0; i < header.size(); ++i) {
      const auto column = std::find(recorded.header.begin(), recorded.header.end(), header[i]);
      if (column != recorded.header.end()) row[i] = found->second[static_cast<std::size_t>(column - recorded.header.begin())];
      if (header[i] == "run_index") row[i] = std::to_string(run.at("index").get<int>());
      if (header[i] == "label") row[i] = run.at("label").get<std::string>();
      if (plan_cell[i] && run.contains("cells") && *plan_cell[i] < run.at("cells").size())
        row[i] = run.at("cells").at(*plan_cell[i]).get<std::string>();
    }
    runs += csv_record(row);
    ++result.rows;
    if (const auto rows = recorded.devices.find(key); rows != recorded.devices.end())
      for (const auto& device : rows->second) devices += csv_record(device);
  }
  OutputFileSet files;
  files.add((fs::path(dir) / "runs.csv").string(), runs);
  files.add((fs::path(dir) / "devices.csv").string(), devices);
  files.commit();
  return result;
}

std::string manifest_json(const ExperimentPlan& plan, const std::map<std::string, std::string>& input_hashes,
                          const std::string& version) {
  nlohmann::ordered_json manifest;
  manifest["experiment"] = plan.file;
  manifest["name"] = plan.name;
  manifest["title"] = plan.title;
  manifest["command"] = plan.command;
  manifest["experiment_sha256"] = sha256_hex(plan.experiment_text);
  manifest["experiment_text"] = plan.experiment_text;
  manifest["includes"] = plan.includes;
  manifest["results_version"] = kResultsVersion;
  manifest["pipegrid_version"] = version;
  manifest["columns"] = runs_header(plan);
  manifest["axes"] = plan.axis_names;
  manifest["sets"] = plan.sets;
  manifest["where"] = plan.where;
  nlohmann::ordered_json inputs = nlohmann::ordered_json::object();
  for (const auto& [path, hash] : input_hashes) inputs[path] = hash;
  manifest["input_sha256"] = inputs;
  nlohmann::ordered_json runs = nlohmann::ordered_json::array();
  // Each run's parameter and label cells, in plan_columns order: merge writes
  // them from here, so a label edited in the file (same run key) does not
  // keep the value of the row recorded before.
  manifest["plan_columns"] = plan.columns;
  for (const PlannedRun& run : plan.runs) {
    nlohmann::ordered_json cells = nlohmann::ordered_json::array();
    for (const std::string& column : plan.columns) {
      const auto found = run.settings.find(column);
      cells.push_back(found == run.settings.end() ? std::string() : found->second.value.to_text());
    }
    runs.push_back({{"key", run.key}, {"index", run.run_index}, {"label", run.label}, {"cells", std::move(cells)}});
  }
  manifest["plan"] = runs;
  return manifest.dump(2) + "\n";
}

void write_manifest(const std::string& dir, const std::string& text) {
  write_file_atomically((fs::path(dir) / "manifest.json").string(), text);
}

}  // namespace pipegrid::sweep
