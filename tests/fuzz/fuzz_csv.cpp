// libFuzzer target: CSV (sweep/csv.hpp). Text either parses or throws
// InputError; what parses writes back (csv_record) to text that parses to
// the same table.

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "sweep/csv.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipegrid;
  CsvTable table;
  try {
    table = parse_csv(fuzz::text_of(data, size), "fuzz.csv");
  } catch (const InputError&) {
    return 0;
  }
  std::string written = csv_record(table.header);
  for (const auto& row : table.rows) written += csv_record(row);
  try {
    const CsvTable again = parse_csv(written, "written.csv");
    fuzz::fuzz_check(again.header == table.header && again.rows == table.rows, "csv_record round trip changed the table");
  } catch (const InputError&) {
    fuzz::fuzz_check(false, "csv_record wrote text that does not parse");
  }
  fuzz::fuzz_check(csv_whole_records(written) == written, "csv_whole_records cut a whole table");
  return 0;
}
