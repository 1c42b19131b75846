#pragma once
// CSV as the sweep writes and reads it (runs.csv, devices.csv, report tables):
// RFC 4180 fields, a header row, records ended by "\n" (a reader also accepts
// "\r\n"), and numbers in the shortest text that reads back exactly.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pipegrid {

/** The shortest text that reads back (strtod, pandas) to the same double.
 *  A finite integral value with magnitude below 2^53 prints as an integer,
 *  without ".0" or an exponent ("16", "1000000000000000", "-0" for negative
 *  zero); other values print as fmt's `{}` does ("0.1", "1.5e-05",
 *  "1e+16"); non-finite values print as "nan", "inf", "-inf". */
std::string format_number(double value);

/** One field: quoted (inner quotes doubled) when it holds a comma, a quote,
 *  CR or LF, or starts or ends with a space; as is otherwise. The empty string
 *  stays empty (an absent value). */
std::string csv_field(std::string_view text);

/** One record: the fields joined by commas, then "\n". */
std::string csv_record(const std::vector<std::string>& fields);

/** A parsed CSV file: its header and records, each record as long as the
 *  header. */
struct CsvTable {
  std::string file;                             ///< the name given to parse_csv, for messages
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::size_t> row_lines;           ///< 1-based line where each record starts

  /** Index of the column named `name`, or nullopt. */
  std::optional<std::size_t> column(std::string_view name) const;
  /** Index of the column named `name`; InputError naming the file when it
   *  has none. */
  std::size_t require_column(std::string_view name) const;
};

/** Parses RFC 4180 text: quoted fields may hold commas, doubled quotes and
 *  line breaks. Throws InputError `FILE:LINE: ...` on an unterminated quote,
 *  a quote inside an unquoted field, text after a closing quote, a record
 *  with a different number of fields than the header, an empty or duplicate
 *  header name, or empty input. A final record without its line break is
 *  accepted. Blank lines between records are not (a blank line is a record
 *  of one empty field). */
CsvTable parse_csv(std::string_view text, const std::string& file);

/** read_text_file + parse_csv. */
CsvTable read_csv_file(const std::string& path);

/** The prefix of `text` made of whole records: everything up to and
 *  including the last line break outside quotes. Resuming a sweep cuts a
 *  torn last line off with it. */
std::string_view csv_whole_records(std::string_view text);

}  // namespace pipegrid
