#include "sweep/results.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

/// Opens a journal for appending, cutting a torn last line and writing the
/// header into a new or empty file.
int open_journal(const std::string& path, const std::vector<std::string>& header) {
  std::string existing;
  if (fs::exists(path)) {
    existing = read_text_file(path);
    const std::string_view whole = csv_whole_records(existing);
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

const std::vector<std::string>& metric_columns(const std::string& command) {
  static const std::vector<std::string> simulate = {
      "minibatch_time_s", "steady_period_s",       "throughput_samples_per_s", "bubble_fraction", "bytes_per_sample",
      "peak_memory_bytes", "peak_memory_host", "memory_capacity_bytes", "stages", "partition"};
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
  for (const char* key : {"minibatch_time_s", "throughput_samples_per_s", "bubble_fraction", "bytes_per_sample", "stages"})
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

RecordedRuns read_recorded_runs(const std::string& dir, bool repair_torn_lines) {
  RecordedRuns recorded;
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
  const auto whole_text = [&](const fs::path& path) {
    std::string text = read_text_file(path.string());
    const std::size_t whole = csv_whole_records(text).size();
    if (whole != text.size()) {
      if (repair_torn_lines) fs::resize_file(path, whole);
      text.resize(whole);
    }
    return text;
  };
  // Device rows of runs whose run row was never written are dropped below.
  std::map<std::string, std::vector<std::vector<std::string>>> devices;
  for (const fs::path& path : device_files) {
    const std::string text = whole_text(path);
    if (text.empty()) continue;
    const CsvTable table = parse_csv(text, path.string());
    std::map<std::string, std::vector<std::vector<std::string>>> in_file;
    for (const auto& row : table.rows) in_file[row[0]].push_back(row);
    for (auto& [key, rows] : in_file) devices[key] = std::move(rows);
  }
  std::map<std::string, std::vector<std::string>> headers_of_key;
  for (const fs::path& path : run_files) {
    const std::string text = whole_text(path);
    if (text.empty()) continue;
    const CsvTable table = parse_csv(text, path.string());
    const std::size_t key_column = table.require_column("run_key");
    recorded.header = table.header;  // the last journal's (files sorted by name)
    for (const auto& row : table.rows) {
      const std::string& key = row[key_column];
      if (const auto existing = recorded.runs.find(key); existing != recorded.runs.end()) {
        if (stable_cells(headers_of_key[key], existing->second) != stable_cells(table.header, row) &&
            std::find(recorded.conflicts.begin(), recorded.conflicts.end(), key) == recorded.conflicts.end())
          recorded.conflicts.push_back(key);
        continue;
      }
      // Stored under the newest header's column order.
      recorded.runs[key] = row;
      headers_of_key[key] = table.header;
    }
  }
  // Rows in another column order (an older plan) are kept by name.
  for (auto& [key, row] : recorded.runs) {
    const auto& header = headers_of_key[key];
    if (header == recorded.header) continue;
    std::vector<std::string> reordered(recorded.header.size());
    for (std::size_t i = 0; i < recorded.header.size(); ++i) {
      const auto found = std::find(header.begin(), header.end(), recorded.header[i]);
      if (found != header.end()) reordered[i] = row[static_cast<std::size_t>(found - header.begin())];
    }
    row = std::move(reordered);
  }
  for (auto& [key, rows] : devices)
    if (recorded.runs.count(key)) recorded.devices[key] = std::move(rows);
  return recorded;
}

namespace {

/// Drops the device rows of runs that have no run row in the shard's run
/// journal: a run killed between its two writes (devices first), or whose
/// run row was torn, is run again and appends its devices again.
void drop_orphan_device_rows(const std::string& devices_path, const std::string& runs_path) {
  if (!fs::exists(devices_path)) return;
  const std::string text = read_text_file(devices_path);
  const std::string_view whole = csv_whole_records(text);
  if (whole.empty()) return;
  std::set<std::string> keys;
  if (fs::exists(runs_path)) {
    const std::string runs_text = read_text_file(runs_path);
    const std::string_view runs_whole = csv_whole_records(runs_text);
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
  runs_fd_ = open_journal(runs_path_, runs_header);
  drop_orphan_device_rows(devices_path, runs_path_);
  devices_fd_ = open_journal(devices_path, devices_columns());
}

Journal::~Journal() {
  if (runs_fd_ >= 0) ::close(runs_fd_);
  if (devices_fd_ >= 0) ::close(devices_fd_);
}

void Journal::append(const RunRows& rows) {
  std::string devices;
  for (const auto& row : rows.devices) devices += csv_record(row);
  if (!devices.empty()) write_all(devices_fd_, devices, runs_path_);
  write_all(runs_fd_, csv_record(rows.run), runs_path_);
}

MergeResult merge_results(const std::string& dir) {
  const fs::path manifest_path = fs::path(dir) / "manifest.json";
  if (!fs::exists(manifest_path))
    throw InputError(fmt::format("{}: no manifest.json: not the output folder of `pipegrid sweep run`", dir));
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(read_text_file(manifest_path.string()));
  } catch (const nlohmann::json::exception& error) {
    throw InputError(fmt::format("{}: not valid JSON: {}", manifest_path.string(), error.what()));
  }
  const RecordedRuns recorded = read_recorded_runs(dir, false);
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
