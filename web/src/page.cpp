// The front end's page, embedded in the tools when they are built (web/frontend/build.sh writes
// it, or an empty file and the reason when npm or the network was missing), so that a copied
// binary serves it with nothing to find or fetch at run time.
#include <string>
#include <string_view>

#include "csp/web/web.hpp"

// CSP_WEB_PAGE and CSP_WEB_STATUS: paths of the built page and of the build step's status line.
#define CSP_WEB_STR2(x) #x
#define CSP_WEB_STR(x) CSP_WEB_STR2(x)
__asm__(".section .rodata\n"
        ".balign 16\n"
        ".global csp_web_page_begin, csp_web_page_end, csp_web_status_begin, csp_web_status_end\n"
        ".hidden csp_web_page_begin, csp_web_page_end, csp_web_status_begin, csp_web_status_end\n"
        "csp_web_page_begin:\n"
        ".incbin \"" CSP_WEB_STR(CSP_WEB_PAGE) "\"\n"
        "csp_web_page_end:\n"
        "csp_web_status_begin:\n"
        ".incbin \"" CSP_WEB_STR(CSP_WEB_STATUS) "\"\n"
        "csp_web_status_end:\n"
        ".byte 0\n"
        ".previous\n");

extern "C" {
__attribute__((visibility("hidden"))) extern const char csp_web_page_begin[], csp_web_page_end[],
    csp_web_status_begin[], csp_web_status_end[];
}

namespace csp::web {

std::string_view page() {
  return {csp_web_page_begin, static_cast<std::size_t>(csp_web_page_end - csp_web_page_begin)};
}

std::string assetsProblem() {
  std::string status(csp_web_status_begin, static_cast<std::size_t>(csp_web_status_end - csp_web_status_begin));
  while (!status.empty() && (status.back() == '\n' || status.back() == ' ')) status.pop_back();
  return status.empty() ? "unknown (web/frontend/build.sh wrote no status)" : status;
}

}  // namespace csp::web
