#pragma once
// Plan: one file that pins everything needed to reproduce a run. The profile
// and the platform XML are embedded, so a plan still runs when the files it
// came from have moved or changed.

#include <string>

#include "core/partition.hpp"
#include "core/profile.hpp"

namespace pipegrid {

struct Plan {
  Profile profile;
  std::string platform_file;  ///< where the platform came from (informative)
  std::string platform_xml;   ///< its content
  Partition partition;
  std::string schedule;
  int micro_batches = 1;
  int mini_batches = 1;
  bool recompute = false;
  std::string network = "analytic";  ///< analytic | simgrid
};

std::string plan_to_json(const Plan& plan);
Plan parse_plan_json(const std::string& text, const std::string& origin);
Plan read_plan_file(const std::string& path);

}  // namespace pipegrid
