#pragma once
// Errors raised by library code. Every message names the file, field or line
// at fault, what was expected and what was found; the CLI prints it and exits
// non-zero. Library code never calls exit().

#include <stdexcept>
#include <string>

namespace pipegrid {

/** Bad user input: a file, a field, an option. The message is complete and
 *  meant for the user as is. */
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/** Well-formed input that admits no feasible run: a partitioner finds no
 *  partition (more stages than layers, no split that fits the memory, a
 *  straight pipeline longer than the model). The message is one line, the
 *  reason, complete as for InputError; the CLI reports it as any InputError
 *  (exit 2), and a sweep records the run's status as `infeasible` instead of
 *  `error`. An out-of-memory verdict is a result, not this. */
class InfeasibleError : public InputError {
 public:
  using InputError::InputError;
};

}  // namespace pipegrid
