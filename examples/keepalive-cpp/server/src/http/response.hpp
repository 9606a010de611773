// The one response this server gives, apart from the event loop that sends
// it, so the bytes on the wire can change without touching socket code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace http {

// The body of every response; the head's Content-Length must agree with it.
inline constexpr char kBody[] = "ok";
inline constexpr size_t kBodyLength = sizeof kBody - 1;

// Appends the status line and headers of the response numbered `id`, up to
// and including the blank line that ends them.
void append_head(std::string &out, uint64_t id);

}  // namespace http
