#include "core/json_input.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"

namespace pipegrid {

namespace {

/// A SAX handler that builds nothing: it follows the JSON path of the value
/// being read and records the first error, so that a failed parse can be
/// reported with the field and position the DOM parser's exception lacks.
class ErrorLocator : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override {
    frames_.push_back({false, 0, {}, false});
    return true;
  }
  bool key(string_t& name) override {
    frames_.back().key = name;
    frames_.back().has_key = true;
    return true;
  }
  bool end_object() override {
    frames_.pop_back();
    return value();
  }
  bool start_array(std::size_t) override {
    frames_.push_back({true, 0, {}, false});
    return true;
  }
  bool end_array() override {
    frames_.pop_back();
    return value();
  }
  bool parse_error(std::size_t position, const std::string& last_token, const nlohmann::json::exception& error) override {
    failed_ = true;
    position_ = position;
    token_ = last_token;
    id_ = error.id;
    message_ = error.what();
    path_ = path();
    return false;
  }

  bool failed() const { return failed_; }
  std::size_t position() const { return position_; }
  const std::string& token() const { return token_; }
  int id() const { return id_; }
  const std::string& message() const { return message_; }
  const std::string& error_path() const { return path_; }

 private:
  struct Frame {
    bool array = false;
    std::size_t index = 0;
    std::string key;
    bool has_key = false;
  };

  bool value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    return true;
  }
  std::string path() const {
    std::string text;
    for (const Frame& frame : frames_) {
      if (frame.array)
        text += fmt::format("[{}]", frame.index);
      else if (frame.has_key)
        text += text.empty() ? frame.key : "." + frame.key;
    }
    return text;
  }

  std::vector<Frame> frames_;
  bool failed_ = false;
  std::size_t position_ = 0;
  std::string token_, message_, path_;
  int id_ = 0;
};

/// Line and column (1-based) of the byte just before `position` in `text`,
/// counted as nlohmann counts them (the position is the bytes read so far).
std::pair<std::size_t, std::size_t> line_and_column(const std::string& text, std::size_t position) {
  const std::size_t end = std::min(position, text.size());
  std::size_t line = 1, line_start = 0;
  for (std::size_t k = 0; k < end; ++k)
    if (text[k] == '\n') {
      ++line;
      line_start = k + 1;
    }
  return {line, end - line_start};
}

/// The library's message without its "[json.exception.KIND.N] " tag.
std::string without_tag(std::string message) {
  if (const auto tag_end = message.find("] "); message.rfind("[json.exception.", 0) == 0 && tag_end != std::string::npos)
    message.erase(0, tag_end + 2);
  return message;
}

}  // namespace

nlohmann::json parse_json_input(const std::string& text, const std::string& origin) {
  // Our formats nest a few levels; a deeper document is refused before it is
  // built (printing or copying one recurses once per level).
  constexpr int kMaxDepth = 64;
  const auto limit_depth = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > kMaxDepth)
      throw InputError(fmt::format("{}: expected JSON nested at most {} levels deep, found deeper nesting", origin, kMaxDepth));
    return true;
  };
  try {
    return nlohmann::json::parse(text, limit_depth);
  } catch (const nlohmann::json::exception& error) {
    ErrorLocator locator;
    nlohmann::json::sax_parse(text, &locator);
    constexpr int kNumberOverflow = 406;  // out_of_range.406: a number beyond the range of a double
    if (locator.failed() && locator.id() == kNumberOverflow) {
      const auto [line, column] = line_and_column(text, locator.position());
      std::string token = locator.token();
      if (token.size() > 40) token = token.substr(0, 40) + "...";
      throw InputError(fmt::format("{}: {}: expected a finite number, found {} (beyond the range of a double) at line {}, "
                                   "column {}",
                                   origin, locator.error_path().empty() ? "value" : locator.error_path(), token, line,
                                   column));
    }
    // A parse_error's message already states the line and column.
    throw InputError(fmt::format("{}: malformed JSON: {}", origin,
                                 without_tag(locator.failed() ? locator.message() : error.what())));
  }
}

std::string shown_json(const nlohmann::json& value) {
  constexpr std::size_t kMaxShown = 60;
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kMaxShown) text = text.substr(0, kMaxShown) + "...";
  return text;
}

void reject_unknown_json_fields(const nlohmann::json& object, const std::string& where,
                                std::initializer_list<std::string_view> known) {
  for (const auto& item : object.items()) {
    if (std::find(known.begin(), known.end(), std::string_view(item.key())) != known.end()) continue;
    std::string expected;
    for (const std::string_view name : known) expected += fmt::format("{}{}", expected.empty() ? "" : ", ", name);
    throw InputError(fmt::format("{}: expected only the fields {}, found '{}'", where, expected, item.key()));
  }
}

std::optional<std::size_t> first_invalid_utf8(std::string_view text) {
  // RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF.
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  std::size_t k = 0;
  while (k < text.size()) {
    const unsigned char lead = byte(k);
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;  // the allowed range of the second byte
    if (lead < 0x80) {
      ++k;
      continue;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;
      if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;
    } else {
      return k;
    }
    if (k + length > text.size()) return k;
    if (byte(k + 1) < low || byte(k + 1) > high) return k;
    for (std::size_t c = 2; c < length; ++c)
      if (byte(k + c) < 0x80 || byte(k + c) > 0xBF) return k;
    k += length;
  }
  return std::nullopt;
}

std::optional<long long> json_integer_in(const nlohmann::json& value, long long min, long long max) {
  if (value.is_number_unsigned()) {
    const std::uint64_t number = value.get<std::uint64_t>();
    if (max < 0 || number > static_cast<std::uint64_t>(max)) return std::nullopt;
    const auto result = static_cast<long long>(number);
    if (result < min) return std::nullopt;
    return result;
  }
  if (value.is_number_integer()) {
    const std::int64_t number = value.get<std::int64_t>();
    if (number < min || number > max) return std::nullopt;
    return number;
  }
  return std::nullopt;
}

std::optional<double> json_number_in(const nlohmann::json& value, double min, double max) {
  if (!value.is_number()) return std::nullopt;
  const double number = value.get<double>();
  if (!std::isfinite(number) || number < min || number > max) return std::nullopt;
  return number;
}

}  // namespace pipegrid
