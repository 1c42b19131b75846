#include "sweep/csv.hpp"

#include <fmt/format.h>

#include <cmath>
#include <unordered_set>

#include "core/error.hpp"
#include "core/io.hpp"

namespace pipegrid {

std::string format_number(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  constexpr double two_to_53 = 9007199254740992.0;
  if (std::fabs(value) < two_to_53 && std::trunc(value) == value) return fmt::format("{:.0f}", value);
  return fmt::format("{}", value);
}

std::string csv_field(std::string_view text) {
  const bool quote = text.find_first_of(",\"\r\n") != std::string_view::npos ||
                     (!text.empty() && (text.front() == ' ' || text.back() == ' '));
  if (!quote) return std::string(text);
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

std::string csv_record(const std::vector<std::string>& fields) {
  std::string out;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) out += ',';
    out += csv_field(fields[i]);
  }
  out += '\n';
  return out;
}

std::optional<std::size_t> CsvTable::column(std::string_view name) const {
  for (std::size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return i;
  return std::nullopt;
}

std::size_t CsvTable::require_column(std::string_view name) const {
  if (const auto index = column(name)) return *index;
  throw InputError(fmt::format("{}: no column '{}' in the header", file, name));
}

namespace {

/// Printable form of a character for messages.
std::string shown(char c) {
  if (c == '\n') return "a line break";
  if (c == '\r') return "a carriage return";
  if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)
    return fmt::format("byte 0x{:02x}", static_cast<unsigned char>(c));
  return fmt::format("'{}'", c);
}

}  // namespace

CsvTable parse_csv(std::string_view text, const std::string& file) {
  CsvTable table;
  table.file = file;
  if (text.empty()) throw InputError(fmt::format("{}: empty file, expected a CSV header", file));

  std::size_t line = 1;
  std::size_t pos = 0;
  std::vector<std::string> record;
  std::size_t record_line = 1;
  bool first = true;

  auto finish_record = [&]() {
    if (first) {
      std::unordered_set<std::string> seen;
      for (std::size_t i = 0; i < record.size(); ++i) {
        if (record[i].empty())
          throw InputError(fmt::format("{}:{}: header column {} has no name", file, record_line, i + 1));
        if (!seen.insert(record[i]).second)
          throw InputError(fmt::format("{}:{}: column '{}' appears twice in the header", file, record_line, record[i]));
      }
      table.header = std::move(record);
      first = false;
    } else {
      if (record.size() != table.header.size())
        throw InputError(fmt::format("{}:{}: expected {} fields (as in the header), found {}", file, record_line,
                                     table.header.size(), record.size()));
      table.rows.push_back(std::move(record));
      table.row_lines.push_back(record_line);
    }
    record.clear();
  };

  while (pos < text.size()) {
    // One field starts at pos.
    std::string field;
    if (text[pos] == '"') {
      const std::size_t open_line = line;
      ++pos;
      for (;;) {
        if (pos >= text.size())
          throw InputError(fmt::format("{}:{}: unterminated quoted field (the closing '\"' is missing)", file, open_line));
        const char c = text[pos];
        if (c == '"') {
          if (pos + 1 < text.size() && text[pos + 1] == '"') {
            field += '"';
            pos += 2;
            continue;
          }
          ++pos;
          break;
        }
        if (c == '\n') ++line;
        field += c;
        ++pos;
      }
      if (pos < text.size() && text[pos] != ',' && text[pos] != '\n' &&
          !(text[pos] == '\r' && pos + 1 < text.size() && text[pos + 1] == '\n'))
        throw InputError(fmt::format("{}:{}: expected ',' or the end of the line after a closing quote, found {}",
                                     file, line, shown(text[pos])));
    } else {
      while (pos < text.size() && text[pos] != ',' && text[pos] != '\n') {
        const char c = text[pos];
        if (c == '\r') {
          if (pos + 1 < text.size() && text[pos + 1] == '\n') break;
          throw InputError(fmt::format("{}:{}: a carriage return inside an unquoted field (quote the field)", file, line));
        }
        if (c == '"')
          throw InputError(fmt::format("{}:{}: a quote inside an unquoted field (quote the field and double the quote)",
                                       file, line));
        field += c;
        ++pos;
      }
    }
    record.push_back(std::move(field));
    // The field's terminator.
    if (pos >= text.size()) {
      finish_record();
      break;
    }
    if (text[pos] == ',') {
      ++pos;
      if (pos >= text.size()) {  // a trailing comma at the end of the text: one more empty field
        record.emplace_back();
        finish_record();
      }
      continue;
    }
    if (text[pos] == '\r') ++pos;
    ++pos;  // '\n'
    finish_record();
    ++line;
    record_line = line;
  }
  if (first) throw InputError(fmt::format("{}: empty file, expected a CSV header", file));
  return table;
}

CsvTable read_csv_file(const std::string& path) { return parse_csv(read_text_file(path), path); }

std::string_view csv_whole_records(std::string_view text) {
  bool quoted = false;
  std::size_t end = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '"') quoted = !quoted;  // a doubled quote toggles twice
    else if (text[i] == '\n' && !quoted) end = i + 1;
  }
  return text.substr(0, end);
}

}  // namespace pipegrid
