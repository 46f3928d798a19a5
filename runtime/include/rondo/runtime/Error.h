//===- Error.h - The runtime's user-facing error type -----------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Every problem a user can cause (a bad file, a bad flag value, a model that
// does not match its weights) is reported as an rt::Error whose message names
// the file, tensor or flag involved. trainerMain turns it into one line on
// stderr and an exit code, so library code never prints or exits itself.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_ERROR_H
#define RONDO_RUNTIME_ERROR_H

#include <stdexcept>
#include <string>

namespace rondo::rt {

class Error : public std::runtime_error {
public:
  explicit Error(const std::string &message) : std::runtime_error(message) {}
};

} // namespace rondo::rt

#endif // RONDO_RUNTIME_ERROR_H
