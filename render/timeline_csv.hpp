#pragma once
// The timeline's CSV form: written by simulate and execute, read back by
// compare and validate (the interchange format of the simulator and the real
// executor). Writer and reader live together so the round trip is exact.

#include <string>

#include "core/timeline.hpp"

namespace pipegrid {

/** CSV with header host,stream,stage,action,micro_batch,mini_batch,start_s,end_s,bytes,peer,memory_bytes.
 *  Numbers are printed with 17 significant digits so a round trip is exact. */
std::string timeline_to_csv(const Timeline& timeline);
Timeline parse_timeline_csv(const std::string& text, const std::string& origin);

}  // namespace pipegrid
