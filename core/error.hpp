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

}  // namespace pipegrid
