#include "response.hpp"

#include <cinttypes>
#include <cstdio>
#include <ctime>

namespace http {
namespace {

// The current time as an IMF-fixdate (RFC 9110, 5.6.7), formatted afresh on
// every call. strftime's day and month names are English because the server
// never calls setlocale and so stays in the "C" locale.
const char *current_date() {
    static char text[32];
    time_t now = time(nullptr);
    struct tm parts;
    gmtime_r(&now, &parts);
    strftime(text, sizeof text, "%a, %d %b %Y %H:%M:%S GMT", &parts);
    return text;
}

void append_id(std::string &out, uint64_t id) {
    char text[24];
    int length = snprintf(text, sizeof text, "%" PRIu64, id);
    out.append(text, static_cast<size_t>(length));
}

}  // namespace

void append_head(std::string &out, uint64_t id) {
    static_assert(kBodyLength == 2, "Content-Length below is written out");
    out += "HTTP/1.1 200 OK\r\nDate: ";
    out += current_date();
    out += "\r\nX-Request-Id: ";
    append_id(out, id);
    out += "\r\nContent-Length: 2\r\n\r\n";
}

}  // namespace http
