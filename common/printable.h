// Strings from files, made safe to print in a message: a NUL inside a GGUF string must not cut
// the message short, and a newline or an escape sequence from a file must not forge lines or
// colours on the user's terminal.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace qeval {

// `text` with control bytes (NUL, newline, ESC, DEL ...) written as \n, \t, \r, \0 or \xHH and
// bytes that are not valid UTF-8 as \xHH; a backslash stays as it is. Valid UTF-8 passes unchanged.
// At most `limit` bytes of the input are shown, then "… (N bytes)".
std::string printable(std::string_view text, std::size_t limit = 200);

// Whether `text` holds a control byte (below 0x20, or DEL): such a name would forge lines in a
// table, a CSV file, a gnuplot script or a terminal, and is refused where a name is defined.
bool has_control_byte(std::string_view text);

// printable() in double quotes: "name".
std::string in_quotes(std::string_view text, std::size_t limit = 200);

// A JSON value from a file as compact JSON text, printable() (invalid UTF-8 replaced, never a throw).
std::string json_text(const nlohmann::json& value, std::size_t limit = 200);

// `text` with every byte that is not part of valid UTF-8 written as the four characters \xHH; valid
// UTF-8 (control bytes included) passes unchanged. For names that go into JSON: a folder or GGUF
// string with such bytes is kept readable, and nlohmann's dump() (which throws on invalid UTF-8)
// can always write it.
std::string utf8_escaped(std::string_view text);
// The same for every string and key of a JSON value (a record's paths, a GGUF model's names).
nlohmann::json utf8_safe(const nlohmann::json& value);
// value.dump(indent) that never throws: bytes that are not UTF-8 become U+FFFD (a last resort; the
// values qeval writes went through utf8_safe).
std::string json_dump(const nlohmann::json& value, int indent = -1);

// One cell of a Markdown table: printable() with '|' written as '\|', so a name from a record, a
// folder or an option can neither add a column nor start a row (issue 51).
std::string markdown_cell(std::string_view text);

// One field of a CSV file (RFC 4180): quoted when it holds a comma, a quote or a line end (its
// quotes doubled); a field a spreadsheet would take for a formula (first character =, +, -, @, tab
// or carriage return) gets a leading single quote, so opening the file runs nothing (issue 51).
std::string csv_field(std::string_view text);
// A JSON value as a CSV field: null empty, booleans true/false, strings csv_field(), numbers in
// their shortest round-trip form.
std::string csv_value(const nlohmann::json& value);

}  // namespace qeval
