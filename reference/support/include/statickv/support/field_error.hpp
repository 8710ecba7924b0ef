#pragma once
// FieldError: a refusal of one named field of a request or of options
// (docs/errors.md). It is a c10::Error whose message reads as every other
// refusal's ("field: expected ... but got ..."), so a caller that catches
// c10::Error (and Python, which sees RuntimeError) sees no change, and it
// carries the field's name as data, so a server answers with the field
// (OpenAI's "param") without reading it back out of the text.
//
//   STATICKV_CHECK_FIELD(t >= 0, "temperature", "expected >= 0 but got ", t);
//   STATICKV_CHECK_FIELD_AT(id < vocab, "prompt", i, "expected a token id ... but got ", id);
//   // the second reads "prompt[3]: expected ..."; both have field() "temperature", "prompt"

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <string>
#include <utility>

namespace statickv::reference {

class FieldError : public c10::Error {
 public:
  /// `message` is the whole text, starting with the field as written
  /// ("prompt[3]: ..."); `field` is the field's name alone ("prompt").
  FieldError(std::string field, std::string message, const c10::SourceLocation& where)
      : c10::Error(where, std::move(message)), field_(std::move(field)) {}

  /// The refused field's name, as a request spells it.
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

/// The field `e` refuses, as data: a FieldError's field(), else empty (a
/// refusal that names no one field). What a server answers as the param.
inline std::string refused_field(const c10::Error& e) {
  const auto* refused = dynamic_cast<const FieldError*>(&e);
  return refused ? refused->field() : std::string();
}

}  // namespace statickv::reference

#define STATICKV_FIELD_ERROR_WHERE \
  ::c10::SourceLocation { __func__, __FILE__, static_cast<uint32_t>(__LINE__) }

/// TORCH_CHECK for one field: raises FieldError(field, "field: " + the rest).
#define STATICKV_CHECK_FIELD(cond, field, ...)                                                 \
  do {                                                                                         \
    if (C10_UNLIKELY_OR_CONST(!(cond))) {                                                      \
      throw ::statickv::reference::FieldError((field), ::c10::str((field), ": ", __VA_ARGS__), \
                                              STATICKV_FIELD_ERROR_WHERE);                     \
    }                                                                                          \
  } while (false)

/// The same for one element of a list field: "field[index]: " + the rest.
#define STATICKV_CHECK_FIELD_AT(cond, field, index, ...)                  \
  do {                                                                    \
    if (C10_UNLIKELY_OR_CONST(!(cond))) {                                 \
      throw ::statickv::reference::FieldError(                            \
          (field), ::c10::str((field), "[", (index), "]: ", __VA_ARGS__), \
          STATICKV_FIELD_ERROR_WHERE);                                    \
    }                                                                     \
  } while (false)
