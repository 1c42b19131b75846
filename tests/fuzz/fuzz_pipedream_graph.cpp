// libFuzzer target: PipeDream graph.txt (read_model_graph, both batch-size
// uses) and PipeDream's antichain construction over what it reads. The
// reader takes a path: the bytes are written to a file of this process.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "core/model_graph.hpp"
#include "core/profile.hpp"
#include "partitioners/antichain.hpp"
#include "tests/fuzz/fuzz_common.hpp"

namespace {

/// A file private to this process, rewritten for every input.
const std::string& graph_path() {
  static const std::string path = [] {
    const char* folder = std::getenv("TMPDIR");
    return std::string(folder && *folder ? folder : "/tmp") + "/pipegrid-fuzz-graph-" + std::to_string(::getpid()) + ".txt";
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipegrid;
  {
    std::ofstream out(graph_path(), std::ios::binary | std::ios::trunc);
    out << fuzz::text_of(data, size);
  }
  try {
    read_model_graph(graph_path(), std::nullopt, BatchSizeUse::Required);
  } catch (const InputError&) {
  }
  ModelGraph graph;
  try {
    graph = read_model_graph(graph_path(), 8, BatchSizeUse::Optional);
  } catch (const InputError&) {
    return 0;
  }
  // What was read is a valid profile, and writes and reads back as one.
  try {
    check_profile(graph.profile, "fuzz");
    parse_profile_json(profile_to_json(graph.profile), "written.json");
  } catch (const InputError&) {
    fuzz::fuzz_check(false, "read_model_graph returned a profile that check_profile or a round trip rejects");
  }
  try {
    antichain_states(graph);
  } catch (const InputError&) {
  }
  return 0;
}
