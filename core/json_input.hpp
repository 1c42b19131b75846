#pragma once
// Reading JSON input files: parsing with messages a user can act on (the
// file, line and column, no library exception codes), and checked access to
// fields (integers in range, finite numbers in range, no unknown keys).

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace pipegrid {

struct Profile;
struct Partition;

/** Parses JSON text. On malformed text throws InputError
 *    "ORIGIN: malformed JSON: parse error at line L, column C: WHAT"
 *  and on a number beyond the range of a double (1e999)
 *    "ORIGIN: PATH: expected a finite number, found 1e999 (beyond the range
 *     of a double) at line L, column C"
 *  where PATH is the field's JSON path (stages[0].layers[1]). A document
 *  nested deeper than 64 levels is refused too. */
nlohmann::json parse_json_input(const std::string& text, const std::string& origin);

/** A JSON value as shown after "found" in a message, cut short when long. */
std::string shown_json(const nlohmann::json& value);

/** Throws InputError "WHERE: expected only the fields A, B, found 'X'" unless
 *  `object` has only fields named in `known`. */
void reject_unknown_json_fields(const nlohmann::json& object, const std::string& where,
                                std::initializer_list<std::string_view> known);

/** `value` when it is a JSON integer in [min, max] (whatever its stored
 *  type: a value beyond 64 bits, or 3.0, is not one); nothing otherwise. */
std::optional<long long> json_integer_in(const nlohmann::json& value, long long min, long long max);

/** `value` when it is a finite JSON number in [min, max]; nothing otherwise. */
std::optional<double> json_number_in(const nlohmann::json& value, double min, double max);

/** The offset of the first byte of `text` that is not part of well-formed
 *  UTF-8 (what a JSON writer cannot encode); nothing when all of it is. Text
 *  readers whose strings reach JSON outputs (graph.txt names, timeline host
 *  ids) refuse such text where they read it. */
std::optional<std::size_t> first_invalid_utf8(std::string_view text);

/** parse_profile_json and parse_partition_json on an already parsed
 *  document (a plan embeds both). */
Profile parse_profile_json_document(const nlohmann::json& document, const std::string& origin);
Partition parse_partition_json_document(const nlohmann::json& document, const std::string& origin, const Profile& profile);

}  // namespace pipegrid
