// Status type and propagation macros shared by every framezip module.
//
// Module boundaries return absl::Status / absl::StatusOr<T>; exceptions from third-party code are
// caught where it is called and turned into a status. FZ_CHECK is for internal invariants only,
// never for request data: it logs and aborts.
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fmt/format.h"
#include "fmt/ranges.h"

namespace framezip {

using Status = absl::Status;
template <typename T>
using StatusOr = absl::StatusOr<T>;

// Debian 12's Abseil has its own absl::string_view, distinct from std::string_view, so
// absl::StrCat does not take std::string_view. Build messages with fmt instead:
//   return InvalidArgumentError("--{}: '{}' is not a number", name, text);
#define FZ_DEFINE_STATUS_HELPER(Name)                                    \
  template <typename... Args>                                            \
  Status Name(fmt::format_string<Args...> format, Args&&... args) {      \
    return absl::Name(fmt::format(format, std::forward<Args>(args)...)); \
  }
FZ_DEFINE_STATUS_HELPER(InvalidArgumentError)
FZ_DEFINE_STATUS_HELPER(NotFoundError)
FZ_DEFINE_STATUS_HELPER(AlreadyExistsError)
FZ_DEFINE_STATUS_HELPER(FailedPreconditionError)
FZ_DEFINE_STATUS_HELPER(OutOfRangeError)
FZ_DEFINE_STATUS_HELPER(ResourceExhaustedError)
FZ_DEFINE_STATUS_HELPER(UnavailableError)
FZ_DEFINE_STATUS_HELPER(UnimplementedError)
FZ_DEFINE_STATUS_HELPER(InternalError)
FZ_DEFINE_STATUS_HELPER(DataLossError)
FZ_DEFINE_STATUS_HELPER(CancelledError)
FZ_DEFINE_STATUS_HELPER(DeadlineExceededError)
FZ_DEFINE_STATUS_HELPER(PermissionDeniedError)
FZ_DEFINE_STATUS_HELPER(UnauthenticatedError)
#undef FZ_DEFINE_STATUS_HELPER

// The status's message as a std::string (absl::string_view does not convert to std::string_view).
inline std::string MessageOf(const Status& status) { return std::string(status.message()); }

// Prefixes a status's message with context, keeping its code: "loading model: <message>".
inline Status Annotate(const Status& status, const std::string& context) {
  if (status.ok()) return status;
  return Status(status.code(), context + ": " + MessageOf(status));
}

// Prints "file:line: FZ_CHECK failed: <what>" and aborts. Out of line so the macro stays small.
[[noreturn]] void CheckFailed(const char* file, int line, std::string_view what);

}  // namespace framezip

#define FZ_STATUS_CONCAT_INNER(a, b) a##b
#define FZ_STATUS_CONCAT(a, b) FZ_STATUS_CONCAT_INNER(a, b)

// Returns the status from the enclosing function when `expr` is not OK.
#define FZ_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status fz_status_ = (expr);      \
    if (!fz_status_.ok()) return fz_status_; \
  } while (0)

// `FZ_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from an OK StatusOr or returns its status.
#define FZ_ASSIGN_OR_RETURN(lhs, expr) \
  FZ_ASSIGN_OR_RETURN_IMPL(FZ_STATUS_CONCAT(fz_statusor_, __LINE__), lhs, expr)
#define FZ_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return std::move(tmp).status(); \
  lhs = std::move(tmp).value()

// Internal invariants (never untrusted input).
#define FZ_CHECK(cond) ((cond) ? (void)0 : ::framezip::CheckFailed(__FILE__, __LINE__, #cond))
#define FZ_CHECK_OP(a, op, b)                               \
  (((a)op(b)) ? (void)0                                     \
              : ::framezip::CheckFailed(__FILE__, __LINE__, \
                                        ::fmt::format(#a " " #op " " #b " ({} vs {})", (a), (b))))
#define FZ_CHECK_EQ(a, b) FZ_CHECK_OP(a, ==, b)
#define FZ_CHECK_NE(a, b) FZ_CHECK_OP(a, !=, b)
#define FZ_CHECK_LT(a, b) FZ_CHECK_OP(a, <, b)
#define FZ_CHECK_LE(a, b) FZ_CHECK_OP(a, <=, b)
#define FZ_CHECK_GE(a, b) FZ_CHECK_OP(a, >=, b)
