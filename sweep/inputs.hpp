#pragma once
// A sweep's input files (EXPERIMENTS.md): the checks made before anything
// runs, platforms given as inline tables written out as files, and which
// files the runs read (the parent reads them once, before forking its runs).
// No SimGrid: the caller reads them (the plan's InputQueries, the runs'
// inputs).

#include <set>
#include <string>
#include <vector>

#include "sweep/experiment.hpp"

namespace pipegrid::sweep {

/** The platform XML that a setting's inline table of `platform cluster`
 *  options generates. */
std::string inline_platform_xml(const Setting& setting);

/** Writes each inline platform of `runs` into DIR/platforms/ (named by the
 *  hash of its XML: the same table is one file, not rewritten when there)
 *  and points the run's platform setting (resolved_path) at it. InputError
 *  when the folder cannot be created. */
void materialize_inline_platforms(std::vector<PlannedRun>& runs, const std::string& dir);

/** InputError when the plan requires a capability this build lacks
 *  (ExperimentPlan::missing_capabilities): "FILE: requires A, B, which
 *  this build of pipegrid lacks (the study is pending)". */
void check_requires(const ExperimentPlan& plan);

/** InputError when an input file of the plan is a folder, or is missing
 *  (the message lists every missing one). */
void check_inputs_exist(const ExperimentPlan& plan);

/** The files a sweep's runs read, and whether a run reads a platform's
 *  routes too (partitioners and tensor parallelism need them). */
struct RunInputs {
  std::set<std::string> profiles, platforms;  ///< resolved paths
  /// A run chooses its partition with a partitioner other than uniform.
  bool partitioners = false;
  /// A run splits its stages over tensor-parallel or context-parallel
  /// groups of more than one host (context_parallel > 1 counts here too).
  bool tensor_parallel = false;
};
RunInputs inputs_of(const std::vector<const PlannedRun*>& runs);

}  // namespace pipegrid::sweep
