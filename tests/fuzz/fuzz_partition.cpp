// libFuzzer target: partition files (parse_partition_file,
// parse_partition_layer_order) against a fixed 8-layer profile. A partition
// read must write back (partition_to_json) to a file that reads back the same.

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/partition.hpp"
#include "core/profile.hpp"
#include "tests/fuzz/fuzz_common.hpp"

namespace {

pipegrid::Profile eight_layers() {
  pipegrid::Profile profile;
  profile.name = "chain8";
  profile.micro_batch_size = 4;
  profile.input_bytes = 40;
  for (int l = 0; l < 8; ++l) {
    pipegrid::Layer layer;
    layer.name = "layer" + std::to_string(l);
    layer.forward_s = 0.5 + l;
    layer.backward_s = 1 + l;
    layer.output_bytes = l == 7 ? 0 : 100.0 * (l + 1);
    layer.parameter_bytes = 10.0 * (l + 1);
    profile.layers.push_back(layer);
  }
  return profile;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipegrid;
  static const Profile profile = eight_layers();
  const std::string text = fuzz::text_of(data, size);
  try {
    parse_partition_layer_order(text, "fuzz.json");
  } catch (const InputError&) {
  }
  PartitionFile file;
  try {
    file = parse_partition_file(text, "fuzz.json", profile);
  } catch (const InputError&) {
    return 0;
  }
  const std::string written = partition_to_json(file.partition);
  try {
    const PartitionFile again = parse_partition_file(written, "written.json", profile);
    fuzz::fuzz_check(partition_to_json(again.partition) == written, "partition_to_json round trip changed the partition");
    fuzz::fuzz_check(again.partition.stage_of_layer == file.partition.stage_of_layer,
                     "partition_to_json round trip changed the stages");
    // The same file read against the profile that holds the split parts.
    parse_partition_json(written, "plan.json: partition", file.profile);
  } catch (const InputError&) {
    fuzz::fuzz_check(false, "partition_to_json wrote a partition that does not read back");
  }
  stage_costs(file.profile, file.partition);
  return 0;
}
