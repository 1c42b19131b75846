#pragma once
// The rank side of the processes launcher (validate/c10d.cpp), for the CLI's
// hidden `pipegrid __rank FOLDER RANK`. LibTorch-free.

#include <string>

namespace pipegrid::validate {

/** Runs rank `rank` of the job the processes launcher wrote into `folder`
 *  (job.json: a run of the executor, or the copy probe of calibrate): joins
 *  the ranks through the FileStore folder/store and Gloo on the loopback
 *  interface, runs its part and writes it to folder/part.RANK.json. Throws
 *  (InputError, std::runtime_error) as execute() does; the launcher reports
 *  a failing rank with the end of its stderr. */
void run_launched_rank(const std::string& folder, int rank);

}  // namespace pipegrid::validate
