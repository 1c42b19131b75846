#pragma once
// Profile: a model as an ordered chain of layers, measured at one micro-batch
// size on one device type. Times are seconds, sizes are bytes.

#include <optional>
#include <string>
#include <vector>

namespace pipegrid {

struct Layer {
  std::string name;
  double forward_s = 0;        ///< forward time of one micro-batch
  double backward_s = 0;       ///< backward time of one micro-batch
  double output_bytes = 0;     ///< bytes crossing the cut right after this layer
  double parameter_bytes = 0;  ///< weight bytes of this layer
};

struct Profile {
  std::string name;
  int micro_batch_size = 1;
  /// Bytes of the model's input for one micro-batch (what the first stage
  /// receives and stashes). 0 when unknown.
  double input_bytes = 0;
  std::vector<Layer> layers;
};

/** Reads a profile JSON file ({"name", "micro_batch_size", "layers": [...]}).
 *  Throws InputError naming the file and field on any missing, mistyped or
 *  negative value. */
Profile read_profile_json(const std::string& path);

/** Parses profile JSON text; `origin` names the source in error messages. */
Profile parse_profile_json(const std::string& text, const std::string& origin);

/** Serialises a profile to JSON text (the format read_profile_json reads). */
std::string profile_to_json(const Profile& profile);

/** Reads PipeDream's graph.txt (times in ms, sizes in bytes) and turns it into
 *  a chain of layers through the canonical topological order of its nodes
 *  (Kahn's algorithm, ties broken by the order the file lists the nodes).
 *  A layer's output_bytes are the outputs of every node before the cut that a
 *  node after it consumes. Input nodes are zeroed (as PipeDream's optimizer
 *  does); their activation bytes become Profile::input_bytes.
 *  `batch_size`: the micro-batch size the times were measured at; when absent
 *  it is inferred from the input node (see SEMANTICS.md, Batch size), and an
 *  InputError is thrown when it cannot be. */
Profile read_pipedream_graph(const std::string& path, std::optional<int> batch_size);

/** Reads either format: a file ending in .json is a profile JSON, anything
 *  else a PipeDream graph.txt. */
Profile read_profile(const std::string& path, std::optional<int> batch_size);

/** Throws InputError when a layer has a negative or non-finite value or the
 *  profile has no layers. `origin` names the source. */
void check_profile(const Profile& profile, const std::string& origin);

}  // namespace pipegrid
