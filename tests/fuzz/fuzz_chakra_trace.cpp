// libFuzzer target: one Chakra trace file (decode_chakra_rank), as rank 0 of
// a 2-rank set whose communicator groups are {"0": [0, 1], "1": [1]}. What
// it reads must encode, read back, and encode to the same bytes.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "interchange/chakra_io.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipegrid;
  using namespace pipegrid::interchange;
  const std::map<std::string, std::vector<int>> groups = {{"0", {0, 1}}, {"1", {1}}};
  RankGraph graph;
  try {
    graph = decode_chakra_rank(fuzz::text_of(data, size), "fuzz.0.et", 0, 2, groups, "fuzz.json");
  } catch (const InputError&) {
    return 0;
  }
  std::string written;
  try {
    written = encode_chakra_rank(graph, "written.0.et", 2, groups);
  } catch (const InputError&) {
    fuzz::fuzz_check(false, "encode_chakra_rank refused a graph that decode_chakra_rank returned");
  }
  RankGraph again;
  try {
    again = decode_chakra_rank(written, "written.0.et", 0, 2, groups, "fuzz.json");
  } catch (const InputError&) {
    fuzz::fuzz_check(false, "encode_chakra_rank wrote a trace that does not read back");
  }
  fuzz::fuzz_check(again.nodes.size() == graph.nodes.size(), "the round trip changed the node count");
  fuzz::fuzz_check(encode_chakra_rank(again, "again.0.et", 2, groups) == written,
                   "the Chakra round trip changed the trace");
  return 0;
}
