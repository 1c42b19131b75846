#pragma once
// Test helpers for error messages: run an action that must throw InputError
// and check what its message says.

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/error.hpp"

namespace pipegrid::testutil {

/// Runs `action`, expects an InputError, and returns its message.
inline std::string input_error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const InputError& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected an InputError, none was thrown";
  return {};
}

}  // namespace pipegrid::testutil

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "message: " << (text)
